package main

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/cubeapi"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
)

func TestDownloadBaseURL(t *testing.T) {
	bound := &net.TCPAddr{IP: net.IPv6unspecified, Port: 43210}
	cases := []struct {
		configured, listen, want string
	}{
		{"", ":8089", "http://127.0.0.1:43210"},
		{"", "0.0.0.0:8089", "http://127.0.0.1:43210"},
		{"", "[::]:8089", "http://127.0.0.1:43210"},
		{"", "10.1.2.3:0", "http://10.1.2.3:43210"},
		{"", "[fd00::1]:8089", "http://[fd00::1]:43210"},
		{"", "master.internal:8089", "http://master.internal:43210"},
		{"http://10.0.0.9:8089/", ":8089", "http://10.0.0.9:8089"},
		{"10.0.0.9:8089", ":8089", "http://10.0.0.9:8089"},
		{"https://cube.example/api", ":8089", "https://cube.example/api"},
	}
	for _, tc := range cases {
		got, err := downloadBaseURL(tc.configured, tc.listen, bound)
		if err != nil || got != tc.want {
			t.Errorf("downloadBaseURL(%q, %q) = %q, %v; want %q", tc.configured, tc.listen, got, err, tc.want)
		}
	}
	for _, bad := range []string{"ftp://x", "http://u:p@x:1", "http://x:1/?q=1"} {
		if _, err := downloadBaseURL(bad, ":8089", bound); err == nil || !strings.Contains(err.Error(), "CUBE_MASTER_DOWNLOAD_BASE_URL") {
			t.Errorf("downloadBaseURL(%q) err = %v, want one naming the variable", bad, err)
		}
	}
}

// TestArtifactProbe checks the redo hook against a stand-in for the data
// plane's download route: what it asks (HEAD, id, token header) and how it
// reads the answers.
func TestArtifactProbe(t *testing.T) {
	var status atomic.Int32
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Method != http.MethodHead || r.URL.Path != cubeapi.PathDownload ||
			r.URL.Query().Get("artifact_id") != "rfs-1" || r.Header.Get(core.DownloadTokenHeader) != "tok" {
			http.Error(w, "unexpected request "+r.Method+" "+r.URL.String(), http.StatusTeapot)
			return
		}
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	p := newArtifactProbe(srv.URL)
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
		got, err := p.Exists(t.Context(), ready)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("answer %d: Exists = %v, %v; want %v, error %v", tc.status, got, err, tc.want, tc.wantErr)
		}
	}

	// Rows the route cannot be asked about are trusted, without a request.
	before := calls.Load()
	for _, a := range []*core.Artifact{
		{ArtifactID: "rfs-1", Status: core.ArtifactCleanupPending, DownloadToken: "tok"},
		{ArtifactID: "rfs-1", Status: core.ArtifactReady},
	} {
		if ok, err := p.Exists(t.Context(), a); !ok || err != nil {
			t.Errorf("Exists(%s, token %q) = %v, %v; want trusted", a.Status, a.DownloadToken, ok, err)
		}
	}
	if calls.Load() != before {
		t.Error("asked the data plane about a row it cannot answer for")
	}

	// No data plane at all is an error, not "gone".
	srv.Close()
	if ok, err := p.Exists(t.Context(), ready); ok || err == nil {
		t.Errorf("unreachable data plane: Exists = %v, %v; want an error", ok, err)
	}
}

func TestEnvdLoader(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	if envdLoader(dir, log) != nil {
		t.Fatal("loader for a directory without envd")
	}
	if envdLoader("", log) != nil {
		t.Fatal("loader for an empty directory setting")
	}
	if err := os.Mkdir(filepath.Join(dir, "envd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if envdLoader(dir, log) != nil {
		t.Fatal("loader for a directory named envd")
	}
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "envd"), []byte("\x7fELF v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	load := envdLoader(other, log)
	if load == nil {
		t.Fatal("no loader for an existing envd binary")
	}
	if b, err := load(); err != nil || string(b) != "\x7fELF v1" {
		t.Fatalf("load = %q, %v", b, err)
	}
	// Read at each use: a replaced binary needs no restart.
	if err := os.WriteFile(filepath.Join(other, "envd"), []byte("\x7fELF v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if b, _ := load(); string(b) != "\x7fELF v2" {
		t.Fatalf("after replacing: %q", b)
	}
}

func TestMigrationsNeedAnUploader(t *testing.T) {
	m := migrations{&control.Service{}}
	_, err := m.Migrate(t.Context(), cubeapi.MigrateRequest{TemplateID: "t"})
	if !errors.Is(err, core.ErrUnsupported) || !strings.Contains(err.Error(), "uploader") {
		t.Fatalf("Migrate err = %v", err)
	}
	if _, err := m.GetMigrateJob(t.Context(), ""); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("GetMigrateJob err = %v", err)
	}
}

func TestSummaryKeepsCreatedAt(t *testing.T) {
	s := summary(&control.TemplateInfo{TemplateID: "t", Status: "READY", CreatedAt: "2026-01-02T03:04:05Z", ImageInfo: "r@sha256:x"})
	if !s.CreatedAt.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) || s.ImageInfo != "r@sha256:x" || s.Status != "READY" {
		t.Fatalf("summary = %+v", s)
	}
	if s := summary(&control.TemplateInfo{TemplateID: "t"}); !s.CreatedAt.IsZero() {
		t.Fatalf("empty created_at gave %v", s.CreatedAt)
	}
}
