package tcapi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

const dlToken = "download-token-1"

type dlFixture struct {
	data   []byte
	sha    string
	h      http.Handler
	lookup *fakeLookup
}

func newDownloadFixture(t *testing.T, store ports.ArtifactStore) *dlFixture {
	t.Helper()
	data := make([]byte, 10000)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.IntN(256))
	}
	put(t, store, core.ArtifactObjectKey("rfs-ready"), data)
	put(t, store, "custom/key.ext4", data[:100])
	sha := sum(data)
	lookup := &fakeLookup{rows: map[string]*core.Artifact{
		"rfs-ready":    {ArtifactID: "rfs-ready", Status: core.ArtifactReady, DownloadToken: dlToken, Ext4SHA256: sha},
		"rfs-custom":   {ArtifactID: "rfs-custom", Status: core.ArtifactReady, DownloadToken: dlToken, ObjectKey: "custom/key.ext4"},
		"rfs-building": {ArtifactID: "rfs-building", Status: core.ArtifactBuilding, DownloadToken: dlToken},
		"rfs-cleanup":  {ArtifactID: "rfs-cleanup", Status: core.ArtifactCleanupPending, DownloadToken: dlToken},
		"rfs-nobytes":  {ArtifactID: "rfs-nobytes", Status: core.ArtifactReady, DownloadToken: dlToken},
		"rfs-notoken":  {ArtifactID: "rfs-notoken", Status: core.ArtifactReady},
	}}
	return &dlFixture{data: data, sha: sha, lookup: lookup,
		h: New(Config{Token: testToken, Artifacts: lookup, Store: store})}
}

func dlURL(id, token string) string {
	u := PathDownload + "?artifact_id=" + id
	if token != "" {
		u += "&token=" + token
	}
	return u
}

func TestDownloadFileStore(t *testing.T) {
	f := newDownloadFixture(t, fileStore(t))
	etag := `"` + f.sha + `"`
	tests := []struct {
		name        string
		method      string
		target      string
		header      map[string]string
		wantStatus  int
		wantBody    []byte // nil: not checked
		wantHeaders map[string]string
	}{
		{name: "full GET, query token", method: "GET", target: dlURL("rfs-ready", dlToken), wantStatus: 200, wantBody: f.data,
			wantHeaders: map[string]string{"Content-Type": "application/octet-stream", "Content-Length": "10000", "ETag": etag,
				"X-Cube-Artifact-Id": "rfs-ready", "Accept-Ranges": "bytes"}},
		{name: "header token", method: "GET", target: dlURL("rfs-ready", ""), header: map[string]string{core.DownloadTokenHeader: dlToken},
			wantStatus: 200, wantBody: f.data},
		{name: "header token wins over a stale query token", method: "GET", target: dlURL("rfs-ready", "stale"),
			header: map[string]string{core.DownloadTokenHeader: dlToken}, wantStatus: 200},
		{name: "first byte", method: "GET", target: dlURL("rfs-ready", dlToken), header: map[string]string{"Range": "bytes=0-0"},
			wantStatus: 206, wantBody: f.data[:1], wantHeaders: map[string]string{"Content-Range": "bytes 0-0/10000", "Content-Length": "1"}},
		{name: "middle range", method: "GET", target: dlURL("rfs-ready", dlToken), header: map[string]string{"Range": "bytes=4096-8191"},
			wantStatus: 206, wantBody: f.data[4096:8192], wantHeaders: map[string]string{"Content-Range": "bytes 4096-8191/10000"}},
		{name: "suffix range", method: "GET", target: dlURL("rfs-ready", dlToken), header: map[string]string{"Range": "bytes=-10"},
			wantStatus: 206, wantBody: f.data[9990:], wantHeaders: map[string]string{"Content-Range": "bytes 9990-9999/10000"}},
		{name: "open range", method: "GET", target: dlURL("rfs-ready", dlToken), header: map[string]string{"Range": "bytes=9000-"},
			wantStatus: 206, wantBody: f.data[9000:]},
		{name: "unsatisfiable range", method: "GET", target: dlURL("rfs-ready", dlToken), header: map[string]string{"Range": "bytes=20000-"},
			wantStatus: 416, wantHeaders: map[string]string{"Content-Range": "bytes */10000"}},
		{name: "HEAD", method: "HEAD", target: dlURL("rfs-ready", dlToken), wantStatus: 200, wantBody: []byte{},
			wantHeaders: map[string]string{"Content-Length": "10000", "ETag": etag, "X-Cube-Artifact-Id": "rfs-ready"}},
		{name: "HEAD with range", method: "HEAD", target: dlURL("rfs-ready", dlToken), header: map[string]string{"Range": "bytes=0-0"},
			wantStatus: 206, wantBody: []byte{}, wantHeaders: map[string]string{"Content-Length": "1"}},
		{name: "If-None-Match hit", method: "GET", target: dlURL("rfs-ready", dlToken), header: map[string]string{"If-None-Match": etag},
			wantStatus: 304, wantBody: []byte{}},
		{name: "If-None-Match bare sha (upstream form)", method: "GET", target: dlURL("rfs-ready", dlToken),
			header: map[string]string{"If-None-Match": f.sha}, wantStatus: 304},
		{name: "If-None-Match in a list", method: "GET", target: dlURL("rfs-ready", dlToken),
			header: map[string]string{"If-None-Match": `"other", ` + etag}, wantStatus: 304},
		{name: "If-None-Match miss", method: "GET", target: dlURL("rfs-ready", dlToken), header: map[string]string{"If-None-Match": `"other"`},
			wantStatus: 200, wantBody: f.data},
		{name: "If-Range stale gives full body", method: "GET", target: dlURL("rfs-ready", dlToken),
			header: map[string]string{"Range": "bytes=0-0", "If-Range": `"other"`}, wantStatus: 200, wantBody: f.data},
		{name: "If-Range current gives range", method: "GET", target: dlURL("rfs-ready", dlToken),
			header: map[string]string{"Range": "bytes=0-0", "If-Range": etag}, wantStatus: 206, wantBody: f.data[:1]},
		{name: "object key from the row", method: "GET", target: dlURL("rfs-custom", dlToken), wantStatus: 200, wantBody: f.data[:100]},
		{name: "wrong token", method: "GET", target: dlURL("rfs-ready", "nope"), wantStatus: 403},
		{name: "missing token", method: "GET", target: dlURL("rfs-ready", ""), wantStatus: 403},
		{name: "token of a row without token", method: "GET", target: dlURL("rfs-notoken", ""), wantStatus: 403},
		{name: "wrong token on HEAD", method: "HEAD", target: dlURL("rfs-ready", "nope"), wantStatus: 403},
		{name: "unknown artifact", method: "GET", target: dlURL("rfs-unknown", dlToken), wantStatus: 403},
		{name: "unknown artifact, internal token", method: "GET", target: dlURL("rfs-unknown", ""),
			header: map[string]string{auth.Header: testToken}, wantStatus: 404},
		{name: "not ready", method: "GET", target: dlURL("rfs-building", dlToken), wantStatus: 404},
		{name: "cleanup pending", method: "GET", target: dlURL("rfs-cleanup", dlToken), wantStatus: 404},
		{name: "bytes missing", method: "GET", target: dlURL("rfs-nobytes", dlToken), wantStatus: 404},
		{name: "missing id", method: "GET", target: PathDownload + "?token=" + dlToken, wantStatus: 400},
		{name: "traversal id", method: "GET", target: dlURL("..%2F..%2Fetc", dlToken), wantStatus: 400},
		{name: "wrong method", method: "POST", target: dlURL("rfs-ready", dlToken), wantStatus: 405},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := do(t, f.h, call{method: tc.method, target: tc.target, header: tc.header})
			if rec.Code != tc.wantStatus {
				t.Fatalf("status %d, want %d (%q)", rec.Code, tc.wantStatus, short(rec.Body.Bytes()))
			}
			if tc.wantBody != nil && !bytes.Equal(rec.Body.Bytes(), tc.wantBody) {
				t.Fatalf("body: %d bytes, want %d", rec.Body.Len(), len(tc.wantBody))
			}
			for k, v := range tc.wantHeaders {
				if got := rec.Header().Get(k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
			if rec.Code >= 400 && rec.Code != 416 && rec.Body.Len() == 0 && tc.method == "GET" {
				t.Errorf("error without a body")
			}
			if (rec.Code == 403 || rec.Code == 404) && rec.Header().Get("X-Cube-Artifact-Id") != "" {
				t.Errorf("error response carries artifact headers")
			}
		})
	}
}

// Over a real TCP connection the file store's bytes go out with
// sendfile(2) (storeReader.SyscallConn); ranges, and requests that follow
// one another on a kept-alive connection, must still get their own bytes.
func TestDownloadOverTCP(t *testing.T) {
	f := newDownloadFixture(t, fileStore(t))
	srv := httptest.NewServer(f.h)
	defer srv.Close()
	tests := []struct {
		rng    string
		status int
		want   []byte
	}{
		{"", 200, f.data},
		{"bytes=4096-8191", 206, f.data[4096:8192]},
		{"bytes=9000-", 206, f.data[9000:]},
		{"bytes=-700", 206, f.data[9300:]},
		{"bytes=100-9999", 206, f.data[100:]},
		{"", 200, f.data},
	}
	for _, tc := range tests {
		req, err := http.NewRequest("GET", srv.URL+dlURL("rfs-ready", dlToken), nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.rng != "" {
			req.Header.Set("Range", tc.rng)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != tc.status || !bytes.Equal(got, tc.want) {
			t.Fatalf("Range %q: status %d, %d bytes (err %v), want %d and %d bytes", tc.rng, resp.StatusCode, len(got), err, tc.status, len(tc.want))
		}
	}
}

func TestDownloadMultiRange(t *testing.T) {
	f := newDownloadFixture(t, fileStore(t))
	rec := do(t, f.h, call{method: "GET", target: dlURL("rfs-ready", dlToken), header: map[string]string{"Range": "bytes=0-1,5000-5009"}})
	if rec.Code != 206 {
		t.Fatalf("status %d", rec.Code)
	}
	_, params, err := mime.ParseMediaType(rec.Header().Get("Content-Type"))
	if err != nil {
		t.Fatal(err)
	}
	mr := multipart.NewReader(rec.Body, params["boundary"])
	want := [][]byte{f.data[0:2], f.data[5000:5010]}
	for i := 0; ; i++ {
		p, err := mr.NextPart()
		if err == io.EOF {
			if i != 2 {
				t.Fatalf("%d parts, want 2", i)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(p)
		if !bytes.Equal(got, want[i]) {
			t.Fatalf("part %d = %x, want %x", i, got, want[i])
		}
	}
}

func TestDownloadSignedURL(t *testing.T) {
	st := &signingStore{ArtifactStore: fileStore(t)}
	f := newDownloadFixture(t, st)
	h := New(Config{Artifacts: f.lookup, Store: st, SignedURLTTL: 600_000_000_000})

	var locs []string
	for range 2 {
		rec := do(t, h, call{method: "GET", target: dlURL("rfs-ready", dlToken)})
		if rec.Code != http.StatusFound {
			t.Fatalf("status %d, want 302", rec.Code)
		}
		loc := rec.Header().Get("Location")
		if !strings.HasPrefix(loc, "https://bucket.s3.example/rfs-ready/rfs-ready.ext4?") {
			t.Fatalf("Location %q", loc)
		}
		if rec.Header().Get("Cache-Control") != "no-store" {
			t.Fatalf("a presigned redirect must not be cached")
		}
		locs = append(locs, loc)
	}
	if locs[0] == locs[1] || st.calls != 2 {
		t.Fatalf("URLs must be minted per request: %q (%d calls)", locs, st.calls)
	}
	if st.ttls[0].Minutes() != 10 {
		t.Fatalf("ttl %v", st.ttls[0])
	}

	// Errors stay real statuses and are decided before any URL is minted.
	for _, tc := range []struct {
		target string
		want   int
	}{
		{dlURL("rfs-ready", "bad"), 403},
		{dlURL("rfs-nobytes", dlToken), 404},
		{dlURL("rfs-building", dlToken), 404},
		{dlURL("nope", dlToken), 403},
	} {
		if rec := do(t, h, call{method: "GET", target: tc.target}); rec.Code != tc.want {
			t.Errorf("%s: %d, want %d", tc.target, rec.Code, tc.want)
		}
	}
	if st.calls != 2 {
		t.Fatalf("URLs minted for refused requests: %d", st.calls)
	}

	// HEAD is answered here: a presigned GET URL does not answer HEAD.
	rec := do(t, h, call{method: "HEAD", target: dlURL("rfs-ready", dlToken)})
	if rec.Code != 200 || rec.Header().Get("Content-Length") != fmt.Sprint(len(f.data)) || st.calls != 2 {
		t.Fatalf("HEAD: %d, length %q, %d presigns", rec.Code, rec.Header().Get("Content-Length"), st.calls)
	}
}

func TestDownloadLookupFailureIsNot200(t *testing.T) {
	h := New(Config{Artifacts: &fakeLookup{err: fmt.Errorf("db: %w", core.ErrStoreNotInitialized)}, Store: fileStore(t)})
	if rec := do(t, h, call{method: "GET", target: dlURL("rfs-ready", dlToken)}); rec.Code != 503 {
		t.Fatalf("status %d", rec.Code)
	}
	h = New(Config{Artifacts: &fakeLookup{err: fmt.Errorf("db down")}, Store: fileStore(t)})
	if rec := do(t, h, call{method: "GET", target: dlURL("rfs-ready", dlToken)}); rec.Code != 500 || strings.Contains(rec.Body.String(), "db down") {
		t.Fatalf("status %d body %q", rec.Code, rec.Body.String())
	}
	if rec := do(t, New(Config{}), call{method: "GET", target: dlURL("rfs-ready", dlToken)}); rec.Code != 503 {
		t.Fatalf("unconfigured: %d", rec.Code)
	}
}

// short keeps failure messages readable when a body is binary.
func short(b []byte) string {
	if len(b) > 120 {
		return fmt.Sprintf("%q... (%d bytes)", b[:120], len(b))
	}
	return string(b)
}

// countingStore counts the readers Open hands out and those closed.
type countingStore struct {
	ports.ArtifactStore
	opened, closed atomic.Int64
}

func (s *countingStore) Open(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	rc, err := s.ArtifactStore.Open(ctx, key, off, n)
	if err != nil {
		return nil, err
	}
	s.opened.Add(1)
	return &countedReader{ReadCloser: rc, s: s}, nil
}

type countedReader struct {
	io.ReadCloser
	s    *countingStore
	once sync.Once
}

func (r *countedReader) Close() error {
	r.once.Do(func() { r.s.closed.Add(1) })
	return r.ReadCloser.Close()
}

// TestDownloadMultiRangeAbortedClosesReaders: net/http writes a
// multi-range answer from a goroutine that can outlive the handler when
// the client goes away; every store reader it opened must still be closed
// (one a goroutine opened after the handler's close was never closed).
func TestDownloadMultiRangeAbortedClosesReaders(t *testing.T) {
	store := &countingStore{ArtifactStore: fileStore(t)}
	f := newDownloadFixture(t, store)
	big := bytes.Repeat([]byte("artifact"), 1<<20) // 8 MiB: more than the sockets buffer
	put(t, store, core.ArtifactObjectKey("rfs-big"), big)
	f.lookup.rows["rfs-big"] = &core.Artifact{ArtifactID: "rfs-big", Status: core.ArtifactReady, DownloadToken: dlToken, Ext4SHA256: sum(big)}
	srv := httptest.NewServer(f.h)
	defer srv.Close()
	var ranges []string
	for i := range MaxRanges {
		ranges = append(ranges, fmt.Sprintf("%d-%d", i<<19, i<<19+(1<<19)-1))
	}
	rng := "bytes=" + strings.Join(ranges, ",")
	for range 100 {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nRange: %s\r\n\r\n", dlURL("rfs-big", dlToken), rng)
		if _, err := io.ReadFull(conn, make([]byte, 64<<10)); err != nil {
			t.Fatal(err)
		}
		conn.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for store.opened.Load() != store.closed.Load() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if o, c := store.opened.Load(), store.closed.Load(); o != c {
		t.Fatalf("%d store readers opened, %d closed", o, c)
	}
}
