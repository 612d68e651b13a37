package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/chunk"
)

// benchArtifacts is a 256 MiB artifact and a rebuild of it: one block
// rewritten every 2.5 MiB (about 5 % of the data changes), the last
// 16 MiB zero (free space).
func benchArtifacts() (v1, v2 []byte) {
	const size, zeros, every = 256 << 20, 16 << 20, 5 << 19
	r := rand.NewChaCha8([32]byte{7})
	v1 = make([]byte, size)
	r.Read(v1[:size-zeros])
	v2 = bytes.Clone(v1)
	for off := every / 2; off < size-zeros; off += every {
		r.Read(v2[off : off+chunk.BlockSize])
	}
	return v1, v2
}

// BenchmarkAssemble builds the rebuilt artifact from a seed file holding
// most of its chunks, the missing chunks served over real HTTP. The seed
// is read cold (its pages dropped before each run, as for an artifact
// written with direct I/O) or warm (all in the page cache).
func BenchmarkAssemble(b *testing.B) {
	v1, v2 := benchArtifacts()
	ctx := context.Background()
	x1, err := chunk.Build(ctx, bytes.NewReader(v1), nil)
	if err != nil {
		b.Fatal(err)
	}
	x2, err := chunk.Build(ctx, bytes.NewReader(v2), nil)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	seedPath := filepath.Join(dir, "seed.ext4")
	if err := os.WriteFile(seedPath, v1, 0o600); err != nil {
		b.Fatal(err)
	}
	seeds := map[[sha256.Size]byte]seed{}
	for _, e := range x1.Chunks {
		if !e.Zero {
			seeds[e.Sum] = seed{path: seedPath, off: e.Offset}
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		first, _ := strconv.Atoi(r.URL.Query().Get("first"))
		count, _ := strconv.Atoi(r.URL.Query().Get("count"))
		if first < 0 || count < 1 || first+count > len(x2.Chunks) {
			http.Error(w, "bad run", http.StatusBadRequest)
			return
		}
		for _, e := range x2.Chunks[first : first+count] {
			if !e.Zero {
				w.Write(v2[e.Offset:e.End()])
			}
		}
	}))
	defer srv.Close()
	ta := newTestAgent(b, srv.URL)
	data, _ := url.Parse(srv.URL + core.ChunkDataPath + "?artifact_id=v2")
	c := &chunkFetch{a: ta.Agent, j: &artifactJob{id: "v2", token: "tok", sha256: x2.SHA256Hex(), size: x2.Size}, x: x2, data: data}
	b.Logf("reuse %.3f of the data, %d chunks", c.reuse(seeds), len(x2.Chunks))
	tmp := filepath.Join(dir, "out.ext4")
	for _, cold := range []bool{true, false} {
		name := "seed=warm"
		if cold {
			name = "seed=cold"
		}
		b.Run(name, func(b *testing.B) {
			prepare := func() {
				if cold {
					dropCache(b, seedPath)
				} else if _, err := os.ReadFile(seedPath); err != nil {
					b.Fatal(err)
				}
			}
			prepare()
			b.SetBytes(x2.Size)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := c.assemble(ctx, tmp, seeds); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				os.Remove(tmp)
				prepare()
				b.StartTimer()
			}
		})
	}
}
