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

// TestChunkRoutesAuthenticateAsDownloads: keyed as the apps run, the chunk
// routes accept what the download accepts and refuse what it refuses: only
// the token derived from the row's seed opens them, never the seed itself
// (a copy of the database) nor another key's token, and a token or id
// given twice is a 400. Before, they compared the column value with the
// token, so a dump's seed opened every artifact's chunks.
func TestChunkRoutesAuthenticateAsDownloads(t *testing.T) {
	store := fileStore(t)
	chunks := chunkstore.New(store)
	data := bytes.Repeat([]byte("chunked bytes "), 40000)
	key := core.ArtifactObjectKey("rfs-a")
	put(t, store, key, data)
	if err := chunks.Put(context.Background(), key, bytes.NewReader(data), ports.ObjectInfo{Size: int64(len(data)), SHA256: sum(data)}); err != nil {
		t.Fatal(err)
	}
	tokens := core.NewDownloadTokens(testToken)
	seed := core.NewDownloadSeed("0123456789abcdef")
	lookup := &fakeLookup{rows: map[string]*core.Artifact{"rfs-a": {ArtifactID: "rfs-a", Status: core.ArtifactReady, DownloadToken: seed}}}
	h := New(Config{Token: testToken, Artifacts: lookup, Store: store, Chunks: chunks, DownloadTokens: tokens})
	good := tokens.For("rfs-a", seed)
	for _, path := range []string{core.ChunkIndexPath + "?artifact_id=rfs-a", core.ChunkDataPath + "?artifact_id=rfs-a&first=0&count=1"} {
		for _, tc := range []struct {
			name, query, token string
			want               int
		}{
			{"the derived token", "", good, http.StatusOK},
			{"the column value (a dump)", "", seed, http.StatusForbidden},
			{"a token derived with another key", "", core.NewDownloadTokens("another-callback-token").For("rfs-a", seed), http.StatusForbidden},
			{"no token", "", "", http.StatusForbidden},
			{"the token twice in the query", "&token=" + good + "&token=" + good, "", http.StatusBadRequest},
			{"the id twice", "&artifact_id=rfs-a", good, http.StatusBadRequest},
		} {
			req := httptest.NewRequest(http.MethodGet, path+tc.query, nil)
			if tc.token != "" {
				req.Header.Set(core.DownloadTokenHeader, tc.token)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Errorf("%s, %s: %d %.100q, want %d", path, tc.name, rec.Code, rec.Body.String(), tc.want)
			}
		}
	}
}
