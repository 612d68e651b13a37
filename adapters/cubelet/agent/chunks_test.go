package agent

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/cubelet/cubeletpb"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/chunk"
)

// chunkMaster serves artifacts the way the master does: the whole file on
// the download route, the index and runs of chunks beside it. Hooks
// tamper with the answers; counters say what crossed the network.
type chunkMaster struct {
	srv   *httptest.Server
	mu    sync.Mutex
	blobs map[string][]byte
	// index, when set, replaces the encoded index of an artifact.
	index func(id string, b []byte) []byte
	// data, when set, replaces the body of a chunk data answer.
	data func(b []byte) []byte
	// gate, when set, runs before a chunk data request is answered (the
	// lock not held): it may hold the answer back.
	gate func(r *http.Request, first int)
	// served, when set, runs once a chunk data request has been answered.
	served func(first int)
	// failRun, when set, answers HTTP 500 to the chunk data requests it
	// picks.
	failRun       func(first int) bool
	noIndex       bool
	failDownload  bool
	wholeBytes    int64
	chunkBytes    int64
	chunkRequests int
}

func newChunkMaster(t *testing.T) *chunkMaster {
	m := &chunkMaster{blobs: map[string][]byte{}}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *chunkMaster) url(id string) string {
	return m.srv.URL + "/prefix" + core.DownloadPath + "?artifact_id=" + id + "&token=tok"
}

func (m *chunkMaster) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/prefix"+core.ChunkDataPath && m.gate != nil {
		first, _ := strconv.Atoi(r.URL.Query().Get("first"))
		m.gate(r, first)
	}
	if r.URL.Path == "/prefix"+core.ChunkDataPath && m.served != nil {
		first, _ := strconv.Atoi(r.URL.Query().Get("first"))
		defer m.served(first)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	id := r.URL.Query().Get("artifact_id")
	blob, ok := m.blobs[id]
	if !ok || r.Header.Get(core.DownloadTokenHeader) != "tok" {
		http.Error(w, "no", http.StatusForbidden)
		return
	}
	x, err := chunk.Build(context.Background(), bytes.NewReader(blob), nil)
	if err != nil {
		panic(err)
	}
	switch r.URL.Path {
	case "/prefix" + core.DownloadPath:
		if m.failDownload {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		m.wholeBytes += int64(len(blob))
		w.Write(blob)
	case "/prefix" + core.ChunkIndexPath:
		if m.noIndex {
			http.NotFound(w, r)
			return
		}
		b, _ := x.Marshal()
		if m.index != nil {
			b = m.index(id, b)
		}
		w.Write(b)
	case "/prefix" + core.ChunkDataPath:
		m.chunkRequests++
		first, _ := strconv.Atoi(r.URL.Query().Get("first"))
		count, _ := strconv.Atoi(r.URL.Query().Get("count"))
		if m.failRun != nil && m.failRun(first) {
			http.Error(w, "chunk store down", http.StatusInternalServerError)
			return
		}
		var out []byte
		for _, e := range x.Chunks[first : first+count] {
			if !e.Zero {
				out = append(out, blob[e.Offset:e.End()]...)
			}
		}
		if m.data != nil {
			out = m.data(out)
		}
		m.chunkBytes += int64(len(out))
		w.Write(out)
	default:
		http.NotFound(w, r)
	}
}

// artifactPair is an artifact and a rebuild of it: blocks inserted, a
// region rewritten, the rest moved but unchanged.
func artifactPair() (v1, v2 []byte) {
	r := rand.NewChaCha8([32]byte{42})
	v1 = make([]byte, 8<<20)
	r.Read(v1[:6<<20]) // the last 2 MiB stay zero (free space)
	fresh := make([]byte, 64<<10)
	r.Read(fresh)
	v2 = bytes.Join([][]byte{v1[:1<<20], fresh, v1[1<<20 : 3<<20], fresh, v1[3<<20+64<<10 : 8<<20-64<<10]}, nil)
	return v1, v2
}

func (ta *testAgent) createFrom(t *testing.T, m *chunkMaster, id string) *cubeletpb.Ret {
	t.Helper()
	return ta.create(t, ext4Spec(id, m.url(id), "tok", m.blobs[id]))
}

func (ta *testAgent) holds(t *testing.T, id string, want []byte) {
	t.Helper()
	final := ta.ArtifactFile(core.DefaultInstanceType, id)
	got, err := os.ReadFile(final)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%s does not hold the artifact (%v)", final, err)
	}
	if _, err := os.Stat(final + ".download"); !os.IsNotExist(err) {
		t.Fatalf("a partial download was left behind: %v", err)
	}
}

// seeded is an agent holding v1 (downloaded whole: it held nothing to
// reuse) and a master offering v2.
func seeded(t *testing.T) (*testAgent, *chunkMaster, []byte) {
	t.Helper()
	v1, v2 := artifactPair()
	m := newChunkMaster(t)
	m.blobs["rfs-v1"], m.blobs["rfs-v2"] = v1, v2
	ta := newTestAgent(t, m.srv.URL+"/prefix")
	if ret := ta.createFrom(t, m, "rfs-v1"); ret.GetRetCode() != cubeletpb.ErrorCode_Success {
		t.Fatalf("v1: %v", ret)
	}
	if m.wholeBytes != int64(len(v1)) || m.chunkBytes != 0 {
		t.Fatalf("v1 with nothing to reuse: %d whole bytes and %d chunk bytes, want the whole file only", m.wholeBytes, m.chunkBytes)
	}
	if _, err := os.Stat(chunkSidecar(ta.ArtifactFile(core.DefaultInstanceType, "rfs-v1"))); err != nil {
		t.Fatalf("v1's index not kept: %v", err)
	}
	m.wholeBytes = 0
	return ta, m, v2
}

func TestCreateImageAssemblesFromHeldChunks(t *testing.T) {
	ta, m, v2 := seeded(t)
	if ret := ta.createFrom(t, m, "rfs-v2"); ret.GetRetCode() != cubeletpb.ErrorCode_Success {
		t.Fatalf("v2: %v", ret)
	}
	ta.holds(t, "rfs-v2", v2)
	if m.wholeBytes != 0 {
		t.Fatalf("the whole file was downloaded (%d bytes)", m.wholeBytes)
	}
	// Its zero chunks are written, as a download writes them: no holes.
	var st syscall.Stat_t
	if err := syscall.Stat(ta.ArtifactFile(core.DefaultInstanceType, "rfs-v2"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 < int64(len(v2)) {
		t.Fatalf("the assembled file has holes: %d bytes allocated of %d", st.Blocks*512, len(v2))
	}
	// 128 KiB are new; the chunks around them and the moved boundaries
	// cost a few chunks more.
	if m.chunkBytes == 0 || m.chunkBytes > 1<<20 {
		t.Fatalf("%d chunk bytes fetched for 128 KiB of new content", m.chunkBytes)
	}
	if !strings.Contains(ta.logs.String(), "artifact assembled from chunks") {
		t.Fatalf("no log of the assembly: %s", ta.logs)
	}
}

// An artifact downloaded whole while its index was not published yet (the
// data plane writes the index of all-new chunks after READY) still seeds
// the next one: the node indexes it itself when a fetch has chunks to look
// for, and keeps that index.
func TestArtifactHeldWithoutIndexSeedsTheNext(t *testing.T) {
	v1, v2 := artifactPair()
	m := newChunkMaster(t)
	m.blobs["rfs-v1"], m.blobs["rfs-v2"] = v1, v2
	ta := newTestAgent(t, m.srv.URL+"/prefix")
	m.noIndex = true
	if ret := ta.createFrom(t, m, "rfs-v1"); ret.GetRetCode() != cubeletpb.ErrorCode_Success {
		t.Fatalf("v1: %v", ret)
	}
	held := ta.ArtifactFile(core.DefaultInstanceType, "rfs-v1")
	if _, err := os.Stat(chunkSidecar(held)); !os.IsNotExist(err) {
		t.Fatalf("v1 came without an index, yet one is kept: %v", err)
	}
	m.noIndex, m.wholeBytes = false, 0
	if ret := ta.createFrom(t, m, "rfs-v2"); ret.GetRetCode() != cubeletpb.ErrorCode_Success {
		t.Fatalf("v2: %v", ret)
	}
	ta.holds(t, "rfs-v2", v2)
	if m.wholeBytes != 0 || m.chunkBytes == 0 || m.chunkBytes > 1<<20 {
		t.Fatalf("v2: %d whole bytes and %d chunk bytes, want only the few new chunks", m.wholeBytes, m.chunkBytes)
	}
	b, err := os.ReadFile(chunkSidecar(held))
	if err != nil {
		t.Fatalf("the index the node made of v1 is not kept: %v", err)
	}
	want, _ := chunk.Build(context.Background(), bytes.NewReader(v1), nil)
	wb, _ := want.Marshal()
	if !bytes.Equal(b, wb) {
		t.Fatal("the index the node made of v1 is not the store's")
	}
}

// hostile rewrites an index's entries and re-encodes it with a valid
// checksum.
func hostile(edit func(x *chunk.Index)) func(string, []byte) []byte {
	return func(id string, b []byte) []byte {
		if id != "rfs-v2" {
			return b
		}
		x, err := chunk.Unmarshal(b)
		if err != nil {
			panic(err)
		}
		edit(x)
		return x.MarshalUnchecked()
	}
}

// Every failure of the chunk path falls back to the whole file and leaves
// nothing half-written.
func TestCreateImageFallsBackToTheWholeFile(t *testing.T) {
	tests := []struct {
		name   string
		tamper func(m *chunkMaster)
		log    string
	}{
		{"no index", func(m *chunkMaster) { m.noIndex = true }, ""},
		{"corrupt chunk", func(m *chunkMaster) {
			m.data = func(b []byte) []byte { b = bytes.Clone(b); b[len(b)/2] ^= 1; return b }
		}, "does not match its sha256"},
		{"missing chunk", func(m *chunkMaster) { m.data = func(b []byte) []byte { return b[:len(b)-chunk.BlockSize] } }, "ended short"},
		{"truncated index", func(m *chunkMaster) {
			m.index = func(id string, b []byte) []byte {
				if id == "rfs-v2" {
					return b[:len(b)-10]
				}
				return b
			}
		}, "truncated"},
		{"index with overlapping chunks", func(m *chunkMaster) {
			m.index = hostile(func(x *chunk.Index) { x.Chunks[3].Offset -= chunk.BlockSize; x.Chunks[3].Length += chunk.BlockSize })
		}, "overlaps"},
		{"index running past the end", func(m *chunkMaster) {
			m.index = hostile(func(x *chunk.Index) { x.Chunks[len(x.Chunks)-1].Length += chunk.BlockSize })
		}, "past the end"},
		{"index of another artifact", func(m *chunkMaster) {
			m.index = hostile(func(x *chunk.Index) { x.SHA256[0] ^= 1 })
		}, "another artifact"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ta, m, v2 := seeded(t)
			tc.tamper(m)
			if ret := ta.createFrom(t, m, "rfs-v2"); ret.GetRetCode() != cubeletpb.ErrorCode_Success {
				t.Fatalf("v2: %v", ret)
			}
			ta.holds(t, "rfs-v2", v2)
			if m.wholeBytes != int64(len(v2)) {
				t.Fatalf("whole-file bytes %d, want the whole file, %d", m.wholeBytes, len(v2))
			}
			if tc.log != "" && !strings.Contains(ta.logs.String(), tc.log) {
				t.Fatalf("the log does not say %q: %s", tc.log, ta.logs)
			}
		})
	}
}

// When the chunks fail and so does the whole file, the node holds nothing
// of the new artifact: no file, no partial download, no index.
func TestFailedChunksAndDownloadLeaveNothing(t *testing.T) {
	ta, m, _ := seeded(t)
	m.data = func(b []byte) []byte { b = bytes.Clone(b); b[0] ^= 1; return b }
	m.failDownload = true
	if ret := ta.createFrom(t, m, "rfs-v2"); ret.GetRetCode() == cubeletpb.ErrorCode_Success {
		t.Fatal("CreateImage succeeded with bad chunks and no download")
	}
	dir := filepath.Dir(ta.ArtifactFile(core.DefaultInstanceType, "rfs-v2"))
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		entries, _ := os.ReadDir(dir)
		t.Fatalf("the failed artifact left %v", entries)
	}
}
