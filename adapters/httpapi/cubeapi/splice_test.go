package cubeapi

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// artifactTC serves data like the template center's download route:
// ranges, a Content-Length, and a plain-text 403 for unknown ids. With
// cut set it declares the whole length, sends half and drops the
// connection.
func artifactTC(t *testing.T, data []byte, cut bool) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("artifact_id") != "rfs-1" {
			http.Error(w, "unknown artifact, or a missing or wrong download token", http.StatusForbidden)
			return
		}
		if cut {
			w.Header().Set("Content-Length", strconv.Itoa(len(data)))
			w.Write(data[:len(data)/2])
			w.(http.Flusher).Flush()
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.Header().Set("ETag", `"e"`)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
	}))
	t.Cleanup(s.Close)
	return s
}

// TestDownloadProxyOverTCP runs the master's download proxy between real
// TCP connections, where the body is spliced from socket to socket.
func TestDownloadProxyOverTCP(t *testing.T) {
	data := make([]byte, 3<<20+12345)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	master := httptest.NewServer(newServer(t, &services{}, artifactTC(t, data, false).URL))
	defer master.Close()
	tests := []struct {
		name, method, id, rng string
		inm                   string // If-None-Match
		status                int
		body                  []byte
		contains              string
	}{
		{name: "not modified", method: "GET", id: "rfs-1", inm: `"e"`, status: 304, body: []byte{}},
		{name: "whole", method: "GET", id: "rfs-1", status: 200, body: data},
		{name: "range", method: "GET", id: "rfs-1", rng: "bytes=100-2000000", status: 206, body: data[100:2000001]},
		{name: "tail", method: "GET", id: "rfs-1", rng: "bytes=-10", status: 206, body: data[len(data)-10:]},
		{name: "unknown", method: "GET", id: "rfs-2", status: 403, contains: "unknown artifact"},
		{name: "head", method: "HEAD", id: "rfs-1", status: 200, body: []byte{}},
		{name: "whole again", method: "GET", id: "rfs-1", status: 200, body: data},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, master.URL+PathDownload+"?artifact_id="+tc.id+"&token=t", nil)
			if tc.rng != "" {
				req.Header.Set("Range", tc.rng)
			}
			if tc.inm != "" {
				req.Header.Set("If-None-Match", tc.inm)
			}
			resp, err := master.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != tc.status {
				t.Fatalf("status %d (err %v), want %d", resp.StatusCode, err, tc.status)
			}
			if tc.body != nil && !bytes.Equal(got, tc.body) {
				t.Fatalf("%d bytes, want %d (equal prefix: %v)", len(got), len(tc.body), bytes.HasPrefix(tc.body, got))
			}
			if tc.contains != "" && !strings.Contains(string(got), tc.contains) {
				t.Fatalf("body %q lacks %q", got, tc.contains)
			}
			if tc.method == "HEAD" && resp.ContentLength != int64(len(data)) {
				t.Fatalf("HEAD Content-Length %d", resp.ContentLength)
			}
			if tc.status == 304 && resp.Header.Get("Content-Length") != "" {
				t.Fatalf("304 carries Content-Length %q", resp.Header.Get("Content-Length"))
			}
			if (tc.status < 300 || tc.status == 304) && resp.Header.Get("ETag") != `"e"` {
				t.Fatalf("ETag %q not passed on", resp.Header.Get("ETag"))
			}
		})
	}
}

// A template center that breaks off mid-body must leave the node with a
// broken download, not a short one that reads as complete.
func TestDownloadProxyBrokenBody(t *testing.T) {
	data := bytes.Repeat([]byte("ext4"), 1<<18)
	master := httptest.NewServer(newServer(t, &services{}, artifactTC(t, data, true).URL))
	defer master.Close()
	resp, err := http.Get(master.URL + PathDownload + "?artifact_id=rfs-1&token=t")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Fatalf("read %d of %d bytes without an error", len(got), len(data))
	}
}
