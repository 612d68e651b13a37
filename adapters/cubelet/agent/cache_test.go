package agent

import (
	"bytes"
	"crypto/sha256"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

// wholeFileClient fetches like a Cubelet: one GET of the download URL, the
// body checked against the sha256 it was told, nothing else.
func wholeFileClient(t *testing.T, url, token string, header map[string]string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Cube-Artifact-Token", token)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func newCache(t *testing.T, m *chunkMaster, maxBytes int64) (*Agent, *httptest.Server) {
	t.Helper()
	a, err := New(Config{DataDir: t.TempDir(), NodeID: "node-c", Token: testToken, MasterURLs: []string{m.srv.URL + "/prefix"},
		CacheMaxBytes: maxBytes, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.CacheHandler())
	t.Cleanup(srv.Close)
	return a, srv
}

func TestCacheServesWholeFilesFromChunks(t *testing.T) {
	v1, v2 := artifactPair()
	m := newChunkMaster(t)
	m.blobs["rfs-v1"], m.blobs["rfs-v2"] = v1, v2
	a, cache := newCache(t, m, int64(len(v1))*3/2)
	url := func(id string) string {
		return cache.URL + "/cube/template/artifact/download?artifact_id=" + id + "&token=tok"
	}

	code, got := wholeFileClient(t, url("rfs-v1"), "tok", nil)
	if code != 200 || sha256.Sum256(got) != sha256.Sum256(v1) {
		t.Fatalf("v1: HTTP %d, %d bytes", code, len(got))
	}
	if m.wholeBytes != int64(len(v1)) {
		t.Fatalf("v1 with nothing to reuse: %d bytes from the master, want the whole file", m.wholeBytes)
	}
	m.wholeBytes = 0
	code, got = wholeFileClient(t, url("rfs-v2"), "tok", nil)
	if code != 200 || !bytes.Equal(got, v2) {
		t.Fatalf("v2: HTTP %d, %d bytes", code, len(got))
	}
	if m.wholeBytes != 0 || m.chunkBytes == 0 || m.chunkBytes > 1<<20 {
		t.Fatalf("v2 from the master: %d whole-file bytes and %d chunk bytes, want only the missing chunks", m.wholeBytes, m.chunkBytes)
	}
	// Served again (a second Cubelet pull), by range, from the cache.
	before := m.chunkBytes
	code, got = wholeFileClient(t, url("rfs-v2"), "tok", map[string]string{"Range": "bytes=100-199"})
	if code != http.StatusPartialContent || !bytes.Equal(got, v2[100:200]) {
		t.Fatalf("range: HTTP %d, %d bytes", code, len(got))
	}
	if m.chunkBytes != before || m.wholeBytes != 0 {
		t.Fatal("a cached artifact was fetched again")
	}
	// The master still decides: a wrong token gets its 403 and no bytes.
	if code, got = wholeFileClient(t, url("rfs-v2"), "wrong", nil); code != http.StatusForbidden || bytes.Contains(got, v2[:64]) {
		t.Fatalf("wrong token: HTTP %d", code)
	}
	// The cache holds at most 1.5 artifacts: v1, served least recently,
	// went.
	if _, err := os.Stat(filepath.Join(a.DataDir(), CacheInstanceType, "rfs-v1")); !os.IsNotExist(err) {
		t.Fatalf("v1 not evicted: %v", err)
	}
}

func TestCachePassesThroughWithoutAnIndex(t *testing.T) {
	v1, _ := artifactPair()
	m := newChunkMaster(t)
	m.blobs["rfs-v1"] = v1
	m.noIndex = true
	_, cache := newCache(t, m, 0)
	code, got := wholeFileClient(t, cache.URL+"/cube/template/artifact/download?artifact_id=rfs-v1&token=tok", "tok", nil)
	if code != 200 || !bytes.Equal(got, v1) {
		t.Fatalf("HTTP %d, %d bytes", code, len(got))
	}
}

func TestCacheRefusesOtherRoutes(t *testing.T) {
	m := newChunkMaster(t)
	_, cache := newCache(t, m, 0)
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/other", 404},
		{"POST", "/cube/template/artifact/download?artifact_id=rfs-1", 405},
		{"GET", "/cube/template/artifact/download?artifact_id=../x", 400},
	} {
		req, _ := http.NewRequest(tc.method, cache.URL+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s: HTTP %d, want %d", tc.method, tc.path, resp.StatusCode, tc.want)
		}
	}
}
