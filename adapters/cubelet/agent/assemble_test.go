package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/cubelet/cubeletpb"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/chunk"
)

// runsOf is the chunk data requests a node holding v1 sends for v2.
func runsOf(t *testing.T, v1, v2 []byte) []chunkRun {
	t.Helper()
	x1, err := chunk.Build(context.Background(), bytes.NewReader(v1), nil)
	if err != nil {
		t.Fatal(err)
	}
	x2, err := chunk.Build(context.Background(), bytes.NewReader(v2), nil)
	if err != nil {
		t.Fatal(err)
	}
	held := map[[sha256.Size]byte]bool{}
	for _, e := range x1.Chunks {
		held[e.Sum] = true
	}
	var missing []int
	for i, e := range x2.Chunks {
		if !e.Zero && !held[e.Sum] {
			missing = append(missing, i)
		}
	}
	runs := (&chunkFetch{x: x2}).runs(missing)
	if len(runs) < 2 {
		t.Fatalf("the rebuild needs %d chunk requests; the test wants several", len(runs))
	}
	return runs
}

// assembled checks that v2 was built from chunks, without the whole file.
func assembled(t *testing.T, ta *testAgent, m *chunkMaster, v2 []byte) {
	t.Helper()
	if ret := ta.createFrom(t, m, "rfs-v2"); ret.GetRetCode() != cubeletpb.ErrorCode_Success {
		t.Fatalf("v2: %v", ret)
	}
	ta.holds(t, "rfs-v2", v2)
	if m.wholeBytes != 0 || !strings.Contains(ta.logs.String(), "artifact assembled from chunks") {
		t.Fatalf("the whole file was downloaded (%d bytes): %s", m.wholeBytes, ta.logs)
	}
}

// setWindow shrinks the window of runs fetched ahead for one test.
func setWindow(t *testing.T, runs int, bytes int64) {
	oldRuns, oldBytes := aheadRuns, aheadBytes
	aheadRuns, aheadBytes = runs, bytes
	t.Cleanup(func() { aheadRuns, aheadBytes = oldRuns, oldBytes })
}

// The first run is answered only after a later one: the writer still
// takes each run's chunks where they belong.
func TestAssembleTakesRunsInOrderWhicheverArrivesFirst(t *testing.T) {
	ta, m, v2 := seeded(t)
	runs := runsOf(t, m.blobs["rfs-v1"], v2)
	later := make(chan struct{})
	var once sync.Once
	var heldBack atomic.Bool
	m.served = func(first int) {
		if first != runs[0].first {
			once.Do(func() { close(later) })
		}
	}
	m.gate = func(r *http.Request, first int) {
		if first != runs[0].first {
			return
		}
		select {
		case <-later:
			heldBack.Store(true)
		case <-r.Context().Done():
		case <-time.After(time.Minute): // a safety net, not a measure
		}
	}
	assembled(t, ta, m, v2)
	if !heldBack.Load() {
		t.Fatal("the first run was not answered after a later one: the test did not test")
	}
}

// A window that holds one run (or two) is full while the writer copies
// held chunks before the next run: the next run is fetched once the
// writer has used the one before, and nothing waits for ever.
func TestAssembleWithAFullWindow(t *testing.T) {
	for _, tc := range []struct {
		runs  int
		bytes int64
	}{{1, 1}, {2, 1 << 20}, {64, 1}} {
		t.Run("", func(t *testing.T) {
			setWindow(t, tc.runs, tc.bytes)
			ta, m, v2 := seeded(t)
			runsOf(t, m.blobs["rfs-v1"], v2)
			assembled(t, ta, m, v2)
		})
	}
}

// A run that fails while others are under way (or held back) stops the
// assembly at once: the runs in flight are cancelled, the whole file is
// downloaded, nothing of the assembly stays.
func TestAssembleStopsWhenARunFails(t *testing.T) {
	ta, m, v2 := seeded(t)
	runs := runsOf(t, m.blobs["rfs-v1"], v2)
	var cancelled atomic.Bool
	m.gate = func(r *http.Request, first int) {
		if first != runs[0].first {
			return
		}
		select { // held until the node gives up on it
		case <-r.Context().Done():
			cancelled.Store(true)
		case <-time.After(time.Minute): // a safety net, not a measure
		}
	}
	m.failRun = func(first int) bool { return first == runs[1].first }
	if ret := ta.createFrom(t, m, "rfs-v2"); ret.GetRetCode() != cubeletpb.ErrorCode_Success {
		t.Fatalf("v2: %v", ret)
	}
	ta.holds(t, "rfs-v2", v2)
	if m.wholeBytes != int64(len(v2)) || !strings.Contains(ta.logs.String(), "HTTP 500") {
		t.Fatalf("whole-file bytes %d, want %d after the failed run: %s", m.wholeBytes, len(v2), ta.logs)
	}
	if !cancelled.Load() {
		t.Fatal("the run held back was not cancelled when another failed")
	}
}

// The node's own file changed since it was indexed: the chunks it no
// longer holds are fetched alone; when too many did, the whole file is.
func TestAssembleFromASeedThatChanged(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(b []byte)
		whole bool
	}{
		{"two chunks changed", func(b []byte) { b[512<<10] ^= 1; b[2<<20] ^= 1 }, false},
		{"the file rewritten", func(b []byte) { rand.NewChaCha8([32]byte{9}).Read(b) }, true},
	}
	old := maxRefetch
	maxRefetch = 4
	t.Cleanup(func() { maxRefetch = old })
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ta, m, v2 := seeded(t)
			held := ta.ArtifactFile(core.DefaultInstanceType, "rfs-v1")
			b, err := os.ReadFile(held)
			if err != nil {
				t.Fatal(err)
			}
			tc.edit(b)
			if err := os.WriteFile(held, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if !tc.whole {
				assembled(t, ta, m, v2)
				return
			}
			if ret := ta.createFrom(t, m, "rfs-v2"); ret.GetRetCode() != cubeletpb.ErrorCode_Success {
				t.Fatalf("v2: %v", ret)
			}
			ta.holds(t, "rfs-v2", v2)
			if m.wholeBytes != int64(len(v2)) || !strings.Contains(ta.logs.String(), "changed in the node's own files") {
				t.Fatalf("whole-file bytes %d, want %d: %s", m.wholeBytes, len(v2), ta.logs)
			}
		})
	}
}

// Cancelling the context stops an assembly waiting for a run.
func TestAssembleStopsWhenCancelled(t *testing.T) {
	ta, m, v2 := seeded(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m.gate = func(r *http.Request, _ int) {
		cancel()
		select {
		case <-r.Context().Done():
		case <-time.After(time.Minute): // a safety net, not a measure
		}
	}
	u, _ := url.Parse(m.url("rfs-v2"))
	j := &artifactJob{id: "rfs-v2", url: u, token: "tok", sha256: hexSHA(v2), size: int64(len(v2))}
	cf, err := ta.fetchIndex(ctx, j)
	if err != nil {
		t.Fatal(err)
	}
	seeds := ta.seeds(ctx, ta.ArtifactFile(core.DefaultInstanceType, "rfs-v2"), cf.x)
	tmp := filepath.Join(t.TempDir(), "v2.download")
	if _, err := cf.assemble(ctx, tmp, seeds); !errors.Is(err, context.Canceled) {
		t.Fatalf("assemble = %v, want context.Canceled", err)
	}
}
