package main

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/chunk"
)

// nodeagent --cache-listen serves the node-local cache: a client that only
// speaks the whole-file download (a Cubelet) gets the artifact from it,
// the cache fetching from its master with the client's token.
func TestBinaryServesTheNodeLocalCache(t *testing.T) {
	bin := buildAgent(t)
	data := make([]byte, 3<<20)
	rand.NewChaCha8([32]byte{7}).Read(data[:2<<20])
	x, err := chunk.Build(context.Background(), bytes.NewReader(data), nil)
	if err != nil {
		t.Fatal(err)
	}
	index, _ := x.Marshal()
	master := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(core.DownloadTokenHeader) != "tok" || r.URL.Query().Get("artifact_id") != "rfs-c" {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		switch r.URL.Path {
		case core.DownloadPath:
			w.Write(data)
		case core.ChunkIndexPath:
			w.Write(index)
		default:
			http.NotFound(w, r)
		}
	}))
	defer master.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cacheAddr := ln.Addr().String()
	ln.Close()
	p := startAgent(t, bin, []string{nodeTokenEnv}, "--data-dir", t.TempDir(), "--master-urls", master.URL, "--cache-listen", cacheAddr)
	defer p.stop(t)
	var resp *http.Response
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodGet, "http://"+cacheAddr+core.DownloadPath+"?artifact_id=rfs-c&token=tok", nil)
		req.Header.Set(core.DownloadTokenHeader, "tok")
		if resp, err = http.DefaultClient.Do(req); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("cache: %v\n%s", err, p.logs.String())
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(got, data) {
		t.Fatalf("cache answered HTTP %d with %d bytes, want the artifact's %d", resp.StatusCode, len(got), len(data))
	}
	if !strings.Contains(p.logs.String(), "node-local cache listening") {
		t.Fatalf("no start-up log of the cache:\n%s", p.logs.String())
	}
}
