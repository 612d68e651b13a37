package tcapi

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/chunkstore"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/chunk"
	"github.com/cubesandbox/templatecenter/ports"
)

func TestChunkRoutes(t *testing.T) {
	store := fileStore(t)
	chunks := chunkstore.New(store)
	r := rand.NewChaCha8([32]byte{3})
	data := make([]byte, 3<<20)
	r.Read(data[:2<<20]) // a megabyte of zeros at the end
	key := core.ArtifactObjectKey("rfs-ready")
	put(t, store, key, data)
	if err := chunks.Put(context.Background(), key, bytes.NewReader(data), ports.ObjectInfo{Size: int64(len(data)), SHA256: sum(data)}); err != nil {
		t.Fatal(err)
	}
	x, err := chunks.Index(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	lookup := &fakeLookup{rows: map[string]*core.Artifact{
		"rfs-ready":    {ArtifactID: "rfs-ready", Status: core.ArtifactReady, DownloadToken: dlToken},
		"rfs-building": {ArtifactID: "rfs-building", Status: core.ArtifactBuilding, DownloadToken: dlToken},
		"rfs-old":      {ArtifactID: "rfs-old", Status: core.ArtifactReady, DownloadToken: dlToken},
	}}
	h := New(Config{Token: testToken, Artifacts: lookup, Store: store, Chunks: chunks})
	noChunks := New(Config{Token: testToken, Artifacts: lookup, Store: store})
	last := len(x.Chunks) - 1
	// The data chunks 0..last, concatenated: everything but the zeros.
	var all []byte
	for _, e := range x.Chunks {
		if !e.Zero {
			all = append(all, data[e.Offset:e.End()]...)
		}
	}
	tests := []struct {
		name   string
		h      http.Handler
		target string
		token  string
		status int
		body   []byte
	}{
		{"index", h, core.ChunkIndexPath + "?artifact_id=rfs-ready", dlToken, 200, nil},
		{"index, wrong token", h, core.ChunkIndexPath + "?artifact_id=rfs-ready", "nope", 403, nil},
		{"index, unknown artifact", h, core.ChunkIndexPath + "?artifact_id=rfs-none", dlToken, 403, nil},
		{"index, not ready", h, core.ChunkIndexPath + "?artifact_id=rfs-building", dlToken, 404, nil},
		{"index, artifact without chunks", h, core.ChunkIndexPath + "?artifact_id=rfs-old", dlToken, 404, nil},
		{"index, no chunk store", noChunks, core.ChunkIndexPath + "?artifact_id=rfs-ready", dlToken, 404, nil},
		{"first chunk", h, core.ChunkDataPath + "?artifact_id=rfs-ready&first=0&count=1", dlToken, 200, data[:x.Chunks[0].Length]},
		{"every chunk", h, core.ChunkDataPath + "?artifact_id=rfs-ready&first=0&count=" + strconv.Itoa(last+1), dlToken, 200, all},
		{"data, wrong token", h, core.ChunkDataPath + "?artifact_id=rfs-ready&first=0&count=1", "nope", 403, nil},
		{"data past the end", h, core.ChunkDataPath + "?artifact_id=rfs-ready&first=" + strconv.Itoa(last) + "&count=2", dlToken, 416, nil},
		{"count 0", h, core.ChunkDataPath + "?artifact_id=rfs-ready&first=0&count=0", dlToken, 400, nil},
		{"count too large", h, core.ChunkDataPath + "?artifact_id=rfs-ready&first=0&count=" + strconv.Itoa(core.MaxChunksPerRequest+1), dlToken, 400, nil},
		{"negative first", h, core.ChunkDataPath + "?artifact_id=rfs-ready&first=-1&count=1", dlToken, 400, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, tc.target, nil)
			req.Header.Set(core.DownloadTokenHeader, tc.token)
			rec := httptest.NewRecorder()
			tc.h.ServeHTTP(rec, req)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			if tc.body != nil && !bytes.Equal(rec.Body.Bytes(), tc.body) {
				t.Fatalf("body of %d bytes, want %d", rec.Body.Len(), len(tc.body))
			}
			if tc.name == "index" {
				got, err := chunk.Unmarshal(rec.Body.Bytes())
				if err != nil || got.Size != int64(len(data)) || len(got.Chunks) != len(x.Chunks) {
					t.Fatalf("index: %v", err)
				}
			}
		})
	}
}

// An uploaded artifact (migrate) is published as chunks too.
func TestUploadPublishesChunks(t *testing.T) {
	st := fileStore(t)
	chunks := chunkstore.New(st)
	data := bytes.Repeat([]byte("ext4 upload "), 50000)
	h := New(Config{Token: testToken, Store: st, Chunks: chunks, Uploads: &fakeRecorder{}, MaxUploadBytes: 1 << 30})
	resp := httptest.NewRecorder()
	h.ServeHTTP(resp, uploadReq("rfs-up", sum(data), bytes.NewReader(data), "", int64(len(data))))
	if resp.Code != 200 {
		t.Fatalf("upload: %d %s", resp.Code, resp.Body)
	}
	x, err := chunks.Index(context.Background(), core.ArtifactObjectKey("rfs-up"))
	if err != nil || x.Size != int64(len(data)) || x.SHA256Hex() != sum(data) {
		t.Fatalf("index after the upload: %v", err)
	}
}
