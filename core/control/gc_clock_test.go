package control_test

import (
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
)

// TestGCJudgesRowsByTheStoresClock: rows are stamped with the database's
// clock (updated_at), and a master's host clock may run ahead of it. GC
// must judge an artifact's age and deadline by the store's clock, as
// docs/reliability.md promises ("ages of rows are judged with the
// database's clock"). Here the master's clock runs 8 days ahead: an
// artifact unused for a day, due in six, must be kept, and a deadline a
// master writes must be the store's time plus the TTL. Before, GC compared
// the database's timestamps with the host clock and collected it.
func TestGCJudgesRowsByTheStoresClock(t *testing.T) {
	e := newEnv(t, "node-1")
	e.svc.Clock = &fakeClock{t: t0.Add(8 * 24 * time.Hour)} // the master's host
	aid := "rfs-0123456789abcdef01234567"
	if err := e.store.Artifacts().Create(e.ctx, &core.Artifact{ArtifactID: aid, Fingerprint: "0123456789abcdef01234567" + "00000000000000000000000000000000000000000000000000000000",
		Status: core.ArtifactReady, Ext4SHA256: shaExt4, Ext4SizeBytes: 1, GCDeadline: t0.Add(6 * 24 * time.Hour).Unix()}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(24 * time.Hour) // the store's clock: a day later
	if _, err := e.svc.GC(e.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Artifacts().Get(e.ctx, aid); err != nil {
		t.Errorf("artifact collected before its deadline by the store's clock: %v", err)
	}

	// A deadline the master writes is the store's now plus the TTL.
	e.ready("tpl-g", fpA)
	got := time.Unix(e.artifact(aidOf(fpA)).GCDeadline, 0).UTC()
	if want := e.clock.Now().Add(control7Days); !got.Equal(want.Truncate(time.Second)) {
		t.Errorf("gc_deadline = %s, want the store's time plus the TTL, %s", got, want)
	}
}

const control7Days = 7 * 24 * time.Hour
