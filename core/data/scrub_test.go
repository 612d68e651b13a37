package data_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/data"
)

func (w *world) advance(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.now = w.now.Add(d)
}

func newScrubber(w *world) *data.Scrubber {
	return &data.Scrubber{Store: w.db, Artifacts: w.blob, Locker: w.locker, Clock: w.clock,
		Config: data.ScrubConfig{Every: time.Hour, Logger: slog.New(slog.DiscardHandler)}}
}

// TestScrubFailsRottenArtifactsAndTheSpecIsBuiltAgain: bytes that rot
// after the build are found by the scrub; the row is failed, the bytes
// removed, and the next build of the spec builds instead of reusing a
// READY row nodes would refuse (they check the sha256) for ever.
func TestScrubFailsRottenArtifactsAndTheSpecIsBuiltAgain(t *testing.T) {
	w := newWorld()
	r := newReplica(t, w, data.ExecutorConfig{})
	reqs := map[string]*core.FromImageRequest{}
	ids := map[string]string{}
	for i, name := range []string{"good", "rotten", "missing", "busy"} {
		req := fromImage("tpl-" + name)
		req.WritableLayerSize = []string{"1Gi", "2Gi", "3Gi", "4Gi"}[i]
		o := buildOnce(t, w, r, "job-"+name, req)
		if o.Err != nil {
			t.Fatalf("build %s: %v", name, o.Err)
		}
		reqs[name], ids[name] = req, o.ArtifactID
	}
	key := func(name string) string { return core.ArtifactObjectKey(ids[name]) }
	orig, _ := w.object(t, key("rotten"))
	w.putObject(t, key("rotten"), bytes.Repeat([]byte{0xEE}, len(orig))) // same length, other bytes
	// Rot does not rewrite the digest a store recorded at upload: the
	// store's metadata shows nothing.
	w.blob.mu.Lock()
	w.blob.hideSHA = true
	w.blob.mu.Unlock()
	// Without a scrub the same spec reuses the READY row: the wedge.
	early := fromImage("tpl-rotten-early")
	early.WritableLayerSize = reqs["rotten"].WritableLayerSize
	if o := buildOnce(t, w, r, "job-rotten-early", early); o.Err != nil || !o.Reused {
		t.Fatalf("before the scrub: %+v, want the rotten row reused", o)
	}
	if err := w.blob.Delete(context.Background(), key("missing")); err != nil {
		t.Fatal(err)
	}
	busyRow, _ := w.artifact(ids["busy"])
	lk, err := w.locker.TryLock(context.Background(), data.LockPrefix+busyRow.Fingerprint)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock(context.Background())

	s := newScrubber(w)
	// Nothing is due before Every has passed since the builds.
	if rep, err := s.RunOnce(context.Background()); err != nil || rep.Checked != 0 || rep.Busy != 0 {
		t.Fatalf("first pass = %+v, %v: the rows were verified just now", rep, err)
	}
	w.advance(2 * time.Hour)
	goodBefore, _ := w.artifact(ids["good"])
	rep, err := s.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(rep.Rotten)
	want := []string{ids["missing"], ids["rotten"]}
	slices.Sort(want)
	if rep.Checked != 3 || rep.Busy != 1 || !slices.Equal(rep.Rotten, want) {
		t.Fatalf("pass = %+v, want 3 checked, 1 busy, rotten %v", rep, want)
	}
	for name, msg := range map[string]string{"rotten": "sha256", "missing": "no object"} {
		a, _ := w.artifact(ids[name])
		if a.Status != core.ArtifactFailed || !strings.Contains(a.LastError, msg) {
			t.Fatalf("%s row = %s %q, want FAILED naming %q", name, a.Status, a.LastError, msg)
		}
		if _, ok := w.object(t, key(name)); ok {
			t.Fatalf("%s: the rotten bytes are still stored", name)
		}
	}
	if a, _ := w.artifact(ids["good"]); a.Status != core.ArtifactReady || !a.UpdatedAt.After(goodBefore.UpdatedAt) {
		t.Fatalf("good row = %s updated %s (was %s), want READY and touched", a.Status, a.UpdatedAt, goodBefore.UpdatedAt)
	}
	if a, _ := w.artifact(ids["busy"]); a.Status != core.ArtifactReady {
		t.Fatalf("busy row = %s, want it left alone", a.Status)
	}
	// The verified row is not read again until Every has passed; the
	// busy one is, once its lock is free.
	if rep, err := s.RunOnce(context.Background()); err != nil || rep.Checked != 0 || rep.Busy != 1 {
		t.Fatalf("pass right after = %+v, %v", rep, err)
	}

	builds := len(r.builder.BuildCalls())
	again := fromImage("tpl-rotten-2") // another template, the same spec
	again.WritableLayerSize = reqs["rotten"].WritableLayerSize
	o := buildOnce(t, w, r, "job-rotten-2", again)
	if o.Err != nil || o.Reused || o.ArtifactID != ids["rotten"] || len(r.builder.BuildCalls()) != builds+1 {
		t.Fatalf("build of the rotten spec = %+v (builder calls %d -> %d), want a fresh build of the same artifact", o, builds, len(r.builder.BuildCalls()))
	}
	if got, _ := w.object(t, key("rotten")); !bytes.Equal(got, orig) {
		t.Fatal("the rebuilt artifact does not hold the original bytes")
	}
	if a, _ := w.artifact(ids["rotten"]); a.Status != core.ArtifactReady || a.LastError != "" {
		t.Fatalf("rebuilt row = %s %q", a.Status, a.LastError)
	}
}

// openHook calls onOpen before every Open of the bucket.
type openHook struct {
	*faultBlobs
	onOpen func()
}

func (b openHook) Open(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	b.onOpen()
	return b.faultBlobs.Open(ctx, key, off, n)
}

// TestScrubStopsWhenItsLockIsLost: the scrub reads an artifact back under
// the spec's fingerprint lock, and a read can be long. When the lock's
// session dies meanwhile, a build of the spec may hold the lock and the
// row by the time the read ends: the scrub must neither fail the row nor
// remove the bytes. Before, nothing watched the lock; the scrub failed the
// row and deleted the bytes whoever held them by then.
func TestScrubStopsWhenItsLockIsLost(t *testing.T) {
	w := newWorld()
	r := newReplica(t, w, data.ExecutorConfig{})
	o := buildOnce(t, w, r, "job-1", fromImage("tpl-a"))
	if o.Err != nil {
		t.Fatal(o.Err)
	}
	key := core.ArtifactObjectKey(o.ArtifactID)
	orig, _ := w.object(t, key)
	rotten := bytes.Repeat([]byte{0xEE}, len(orig))
	w.putObject(t, key, rotten)
	w.advance(2 * time.Hour)

	dl := &droppableLocker{Locker: w.locker}
	s := newScrubber(w)
	s.Locker = dl
	s.Artifacts = openHook{faultBlobs: w.blob, onOpen: func() { dl.drop(true) }}
	rep, err := s.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rotten) != 0 {
		t.Errorf("pass = %+v: a scrub that lost its lock judged the artifact", rep)
	}
	if a, _ := w.artifact(o.ArtifactID); a.Status != core.ArtifactReady {
		t.Errorf("row = %s %q, want it left READY", a.Status, a.LastError)
	}
	if got, ok := w.object(t, key); !ok || !bytes.Equal(got, rotten) {
		t.Error("the bytes were removed by a scrub that had lost its lock")
	}
}

// TestScrubLeavesAdoptedLegacyArtifactsAlone: rows adopted from an
// upstream database have a fingerprint and a sha256, but their bytes are
// on the master's disk (ext4_path) until `tpl merge` moves them into the
// store; the row names no object. Such a row is not the store's to judge:
// the scrub must leave it READY, or migrate refuses it and the documented
// migration path is closed. Before, the scrub looked only for a missing
// fingerprint or sha256 and failed these rows as "no object in the store".
func TestScrubLeavesAdoptedLegacyArtifactsAlone(t *testing.T) {
	w := newWorld()
	fp := strings.Repeat("c3", 32)
	aid, _ := core.ArtifactIDFor(fp)
	row := &core.Artifact{
		ArtifactID: aid, Fingerprint: fp, SourceImageRef: "registry.example/app:v1", DownloadBaseURL: "http://old-master:8089",
		Ext4Path: "/data/cube/rootfs/" + aid + ".ext4", Ext4SHA256: strings.Repeat("ab", 32), Ext4SizeBytes: 4096,
		Status: core.ArtifactReady,
	}
	if err := w.db.Artifacts().Create(context.Background(), row); err != nil {
		t.Fatal(err)
	}
	w.advance(2 * time.Hour)
	rep, err := newScrubber(w).RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rotten) != 0 {
		t.Errorf("pass = %+v, want no rotten artifact", rep)
	}
	a, _ := w.artifact(aid)
	if a.Status != core.ArtifactReady || a.LastError != "" {
		t.Errorf("adopted row = %s %q, want READY", a.Status, a.LastError)
	}
	if !a.UpdatedAt.After(row.UpdatedAt) {
		t.Error("the adopted row was not touched: the scrub's cursor would stop on it")
	}
}
