package tcclient

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/envelope"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

const token = "tc-token"

// tc answers the first len(script) requests with the scripted statuses
// (0 = drop the connection after reading the request) and 200 afterwards.
type tc struct {
	mu     sync.Mutex
	script []int
	calls  int
	bodies [][]byte
	hdrs   []http.Header
	paths  []string
}

func (s *tc) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.calls++
	n := s.calls
	b, _ := io.ReadAll(r.Body)
	s.bodies = append(s.bodies, b)
	s.hdrs = append(s.hdrs, r.Header.Clone())
	s.paths = append(s.paths, r.URL.Path)
	s.mu.Unlock()
	status := http.StatusOK
	if n <= len(s.script) {
		status = s.script[n-1]
	}
	switch status {
	case 0:
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	case http.StatusOK:
		wire.WriteJSON(w, 200, map[string]string{"status": "ok"})
	default:
		wire.WriteError(w, status, "scripted "+http.StatusText(status))
	}
}

type sleeps struct{ d []time.Duration }

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.d = append(s.d, d)
	return ctx.Err()
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newClient(t *testing.T, base string, sl *sleeps) *Client {
	t.Helper()
	c, err := New(Config{BaseURL: base, Token: token, Sleep: sl.sleep, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func buildReq() ports.BuildRequest {
	return ports.BuildRequest{JobID: "job-1", Request: &core.FromImageRequest{SourceImageRef: "nginx:1", WritableLayerSize: "20Gi"},
		DownloadBaseURL: "http://m:8089", EnvdSHA256: "ab", EnvdData: []byte{0, 1, 2}}
}

func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestSubmitBuild(t *testing.T) {
	tests := []struct {
		name      string
		script    []int
		wantErr   error
		wantCalls int
	}{
		{name: "accepted", wantCalls: 1},
		{name: "busy", script: []int{429}, wantErr: core.ErrBusy, wantCalls: 1},
		{name: "in flight", script: []int{409}, wantErr: core.ErrConflict, wantCalls: 1},
		{name: "job gone", script: []int{404}, wantErr: core.ErrNotFound, wantCalls: 1},
		{name: "bad request", script: []int{400}, wantErr: core.ErrInvalidArgument, wantCalls: 1},
		{name: "token mismatch", script: []int{401}, wantErr: wire.ErrUnauthorized, wantCalls: 1},
		{name: "no token / executor on TC", script: []int{503}, wantErr: wire.ErrUnavailable, wantCalls: 1},
		{name: "500 is not retried", script: []int{500}, wantErr: errors.New("any"), wantCalls: 1},
		{name: "connection lost after sending is not retried", script: []int{0}, wantErr: errors.New("any"), wantCalls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &tc{script: tt.script}
			srv := httptest.NewServer(s)
			defer srv.Close()
			sl := &sleeps{}
			err := newClient(t, srv.URL, sl).SubmitBuild(context.Background(), buildReq())
			// The handler may still be running after a dropped connection.
			s.mu.Lock()
			defer s.mu.Unlock()
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("unexpected %v", err)
			case tt.wantErr != nil && err == nil:
				t.Fatal("expected an error")
			case tt.wantErr != nil && tt.wantErr.Error() != "any" && !errors.Is(err, tt.wantErr):
				t.Fatalf("%v is not %v", err, tt.wantErr)
			}
			if err != nil && tt.wantErr.Error() != "any" && !strings.Contains(err.Error(), "scripted") {
				t.Fatalf("error lost the TC's message: %v", err)
			}
			if s.calls != tt.wantCalls || len(sl.d) != 0 {
				t.Fatalf("%d calls, sleeps %v", s.calls, sl.d)
			}
			if s.paths[0] != "/tc/api/v1/build" || s.hdrs[0].Get(auth.Header) != token {
				t.Fatalf("path %s token %q", s.paths[0], s.hdrs[0].Get(auth.Header))
			}
			var got wire.BuildRequest
			if err := envelope.DecodeReader(bytes.NewReader(s.bodies[0]), &got); err != nil {
				t.Fatal(err)
			}
			if got.JobID != "job-1" || got.Request.SourceImageRef != "nginx:1" || !bytes.Equal(got.EnvdData, []byte{0, 1, 2}) {
				t.Fatalf("TC got %+v", got)
			}
		})
	}
}

func TestSubmitBuildRetriesOnlyUnsentRequests(t *testing.T) {
	sl := &sleeps{}
	err := newClient(t, closedAddr(t), sl).SubmitBuild(context.Background(), buildReq())
	if err == nil || !strings.Contains(err.Error(), "attempt 3 of 3") {
		t.Fatalf("err %v", err)
	}
	if !slices.Equal(sl.d, []time.Duration{200 * time.Millisecond, 400 * time.Millisecond}) {
		t.Fatalf("sleeps %v", sl.d)
	}
}

func TestDeleteArtifact(t *testing.T) {
	tests := []struct {
		name       string
		script     []int
		wantErr    error
		wantCalls  int
		wantSleeps []time.Duration
	}{
		{name: "deleted", wantCalls: 1},
		{name: "503 twice then ok", script: []int{503, 503}, wantCalls: 3, wantSleeps: []time.Duration{200 * time.Millisecond, 400 * time.Millisecond}},
		{name: "dropped connection retried (idempotent)", script: []int{0}, wantCalls: 2, wantSleeps: []time.Duration{200 * time.Millisecond}},
		{name: "429 retried", script: []int{429}, wantCalls: 2, wantSleeps: []time.Duration{200 * time.Millisecond}},
		{name: "gives up after 3", script: []int{500, 500, 500, 500}, wantErr: errors.New("any"), wantCalls: 3,
			wantSleeps: []time.Duration{200 * time.Millisecond, 400 * time.Millisecond}},
		{name: "409 final", script: []int{409}, wantErr: core.ErrConflict, wantCalls: 1},
		{name: "401 final", script: []int{401}, wantErr: wire.ErrUnauthorized, wantCalls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &tc{script: tt.script}
			srv := httptest.NewServer(s)
			defer srv.Close()
			sl := &sleeps{}
			err := newClient(t, srv.URL, sl).DeleteArtifact(context.Background(), "rfs-1")
			s.mu.Lock()
			defer s.mu.Unlock()
			if (err != nil) != (tt.wantErr != nil) || (err != nil && tt.wantErr.Error() != "any" && !errors.Is(err, tt.wantErr)) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
			if s.calls != tt.wantCalls || !slices.Equal(sl.d, tt.wantSleeps) {
				t.Fatalf("%d calls, sleeps %v", s.calls, sl.d)
			}
			if string(s.bodies[0]) != `{"artifact_id":"rfs-1"}` || s.paths[0] != "/tc/api/v1/artifact/delete" {
				t.Fatalf("body %s path %s", s.bodies[0], s.paths[0])
			}
		})
	}
	if err := newClient(t, "http://x", &sleeps{}).DeleteArtifact(context.Background(), "a/b"); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("bad id: %v", err)
	}
}

func TestUploadArtifact(t *testing.T) {
	data := []byte("ext4 bytes")
	s := sha256.Sum256(data)
	sha := hex.EncodeToString(s[:])
	var gotQuery, gotToken string
	var gotBody []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotQuery, gotToken = r.URL.RawQuery, r.Header.Get(auth.Header)
		gotBody, _ = io.ReadAll(r.Body)
		if r.URL.Query().Get("artifact_id") == "rfs-taken" {
			wire.WriteError(w, http.StatusConflict, "already stored with another sha256")
			return
		}
		wire.WriteJSON(w, 200, wire.UploadResponse{Status: "uploaded", ArtifactID: "rfs-1", SHA256: sha, SizeBytes: int64(len(data)), ObjectKey: "rfs-1/rfs-1.ext4", StorageBackend: "s3"})
	}))
	defer srv.Close()
	c := newClient(t, srv.URL, &sleeps{})
	out, err := c.UploadArtifact(context.Background(), "rfs-1", bytes.NewReader(data), ports.ObjectInfo{Size: int64(len(data)), SHA256: sha})
	if err != nil || out != (ports.StoredObject{ObjectKey: "rfs-1/rfs-1.ext4", StorageBackend: "s3"}) {
		t.Fatalf("%+v %v", out, err)
	}
	if gotQuery != "artifact_id=rfs-1&sha256="+sha+"&size=10" || !bytes.Equal(gotBody, data) || gotToken != token {
		t.Fatalf("query %q body %q token %q", gotQuery, gotBody, gotToken)
	}
	_, err = c.UploadArtifact(context.Background(), "rfs-taken", bytes.NewReader(data), ports.ObjectInfo{Size: int64(len(data)), SHA256: sha})
	if !errors.Is(err, core.ErrConflict) {
		t.Fatalf("err %v", err)
	}
}

// TestUploadArtifactWrongSize: a body shorter or longer than the declared
// size is the caller's mismatch (core.ErrInvalidArgument, not a broken
// connection), and the data plane never receives a complete body for it,
// so it cannot store the first Size bytes of a longer one.
func TestUploadArtifactWrongSize(t *testing.T) {
	data := []byte("0123456789")
	s := sha256.Sum256(data)
	sha := hex.EncodeToString(s[:])
	var mu sync.Mutex
	var complete []int // lengths of bodies received whole
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return // the client aborted the body: nothing to store
		}
		mu.Lock()
		complete = append(complete, len(b))
		mu.Unlock()
		wire.WriteJSON(w, 200, wire.UploadResponse{Status: "uploaded", ObjectKey: "k", StorageBackend: "file"})
	}))
	defer srv.Close()
	c := newClient(t, srv.URL, &sleeps{})
	for _, body := range [][]byte{data[:9], nil, append(bytes.Clone(data), 'x'), append(bytes.Clone(data), data...)} {
		_, err := c.UploadArtifact(context.Background(), "rfs-1", bytes.NewReader(body), ports.ObjectInfo{Size: int64(len(data)), SHA256: sha})
		if !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("body of %d bytes for a declared %d: %v, want an error wrapping core.ErrInvalidArgument", len(body), len(data), err)
		}
		if err != nil && strings.Contains(err.Error(), token) {
			t.Errorf("error %q contains the token", err)
		}
	}
	mu.Lock()
	if len(complete) != 0 {
		t.Fatalf("the data plane received whole bodies of %v bytes for uploads whose bodies did not match", complete)
	}
	mu.Unlock()

	// Bodies of the right length go through whole, however their reader
	// splits them.
	for name, r := range map[string]func() io.Reader{
		"one byte at a time": func() io.Reader { return iotest.OneByteReader(bytes.NewReader(data)) },
		"EOF with the data":  func() io.Reader { return iotest.DataErrReader(bytes.NewReader(data)) },
		"half reads":         func() io.Reader { return iotest.HalfReader(bytes.NewReader(data)) },
	} {
		if _, err := c.UploadArtifact(context.Background(), "rfs-1", r(), ports.ObjectInfo{Size: int64(len(data)), SHA256: sha}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(complete, []int{10, 10, 10}) {
		t.Fatalf("the data plane received bodies of %v bytes, want three of 10", complete)
	}
}

// TestArtifactExists checks the probe against a stand-in for the data
// plane's download route: what it asks (HEAD, id, download token header,
// and the shared token, without which an unknown id is a 403) and how it
// reads the answers.
func TestArtifactExists(t *testing.T) {
	var status atomic.Int32
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Method != http.MethodHead || r.URL.Path != core.DownloadPath ||
			r.URL.Query().Get("artifact_id") != "rfs-1" || r.Header.Get(core.DownloadTokenHeader) != "tok" ||
			r.Header.Get(auth.Header) != token {
			http.Error(w, "unexpected request "+r.Method+" "+r.URL.String(), http.StatusTeapot)
			return
		}
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	p := newClient(t, srv.URL, &sleeps{})
	ready := &core.Artifact{ArtifactID: "rfs-1", Status: core.ArtifactReady, DownloadToken: "tok"}

	cases := []struct {
		status  int
		want    bool
		wantErr bool
	}{
		{http.StatusOK, true, false},
		{http.StatusNotFound, false, false},
		{http.StatusForbidden, false, true},
		{http.StatusBadGateway, false, true},
	}
	for _, tc := range cases {
		status.Store(int32(tc.status))
		got, err := p.ArtifactExists(t.Context(), ready)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("answer %d: Exists = %v, %v; want %v, error %v", tc.status, got, err, tc.want, tc.wantErr)
		}
	}

	// Rows the route cannot be asked about: one that is not READY is
	// trusted, a READY one without a token is an error, never a guess;
	// neither makes a request.
	before := calls.Load()
	cleanup := &core.Artifact{ArtifactID: "rfs-1", Status: core.ArtifactCleanupPending, DownloadToken: "tok"}
	if ok, err := p.ArtifactExists(t.Context(), cleanup); !ok || err != nil {
		t.Errorf("Exists(%s) = %v, %v; want trusted", cleanup.Status, ok, err)
	}
	tokenless := &core.Artifact{ArtifactID: "rfs-1", Status: core.ArtifactReady}
	if ok, err := p.ArtifactExists(t.Context(), tokenless); ok || !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("Exists(READY without a token) = %v, %v; want an error wrapping core.ErrInvalidArgument", ok, err)
	}
	if calls.Load() != before {
		t.Error("asked the data plane about a row it cannot answer for")
	}

	// No data plane at all is an error, not "gone".
	srv.Close()
	if ok, err := p.ArtifactExists(t.Context(), ready); ok || err == nil {
		t.Errorf("unreachable data plane: Exists = %v, %v; want an error", ok, err)
	}
}
