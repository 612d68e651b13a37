package data_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/data"
	"github.com/cubesandbox/templatecenter/ports/portsmock"
)

// TestRebuildKeepsTheDownloadToken: an artifact row's download token is
// handed to every template that uses the artifact (their stored requests
// carry it in the artifact URL). When the row's bytes went missing and a
// build of the spec builds them again, the row must keep its token, or
// those templates' URLs stop working. Before, every fresh build minted a
// new token, the rebuild of an existing row included.
func TestRebuildKeepsTheDownloadToken(t *testing.T) {
	w := newWorld()
	var n atomic.Int32
	w.ids.NewTokenFunc = func() string { return fmt.Sprintf("tok-%d", n.Add(1)) }
	r := newReplica(t, w, data.ExecutorConfig{})
	first := buildOnce(t, w, r, "job-1", fromImage("tpl-a"))
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	before, _ := w.artifact(first.ArtifactID)
	if before.DownloadToken == "" {
		t.Fatal("the first build minted no token")
	}
	if err := w.blob.Delete(context.Background(), core.ArtifactObjectKey(first.ArtifactID)); err != nil {
		t.Fatal(err)
	}
	second := buildOnce(t, w, r, "job-2", fromImage("tpl-b"))
	if second.Err != nil || second.Reused {
		t.Fatalf("second build: %+v, want a rebuild", second)
	}
	after, _ := w.artifact(first.ArtifactID)
	eq(t, "token after the rebuild", after.DownloadToken, before.DownloadToken)
	eq(t, "status", after.Status, core.ArtifactReady)
}

// TestGCDeadlineIsTheStoresTime: the control plane's GC judges deadlines
// by the store's clock, so the deadline a build writes is the store's now
// plus GCDeadlineAfter, whatever the replica's host clock says (here 8
// days ahead). Before, it was the host's.
func TestGCDeadlineIsTheStoresTime(t *testing.T) {
	w := newWorld()
	r := newReplica(t, w, data.ExecutorConfig{})
	ahead := w.now.Add(8 * 24 * time.Hour)
	r.exec.Clock = &portsmock.ClockMock{NowFunc: func() time.Time { return ahead }}
	o := buildOnce(t, w, r, "job-1", fromImage("tpl-a"))
	if o.Err != nil {
		t.Fatal(o.Err)
	}
	a, _ := w.artifact(o.ArtifactID)
	eq(t, "gc_deadline", time.Unix(a.GCDeadline, 0).UTC(), w.now.Add(data.DefaultGCDeadlineAfter).UTC())
}
