package httpapi_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/artifactstore"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/cubeapi"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/masterclient"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/tcapi"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/tcclient"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// The clients and servers of this adapter, wired to each other over real
// HTTP: errors map back to the sentinels the services returned, and the
// bodies survive the trip.

const token = "shared-secret"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type builds struct {
	err error
	got []ports.BuildRequest
}

func (b *builds) Submit(_ context.Context, r ports.BuildRequest) error {
	b.got = append(b.got, r)
	return b.err
}

type deleter struct{ err error }

func (d deleter) DeleteArtifact(context.Context, string) error { return d.err }

func TestDispatcherAgainstTemplateCenter(t *testing.T) {
	b := &builds{}
	tc := httptest.NewServer(tcapi.New(tcapi.Config{Token: token, Builds: b, Deleter: deleter{err: core.ErrNotFound}, Logger: quiet}))
	defer tc.Close()
	noSleep := func(context.Context, time.Duration) error { return nil }
	c, err := tcclient.New(tcclient.Config{BaseURL: tc.URL, Token: token, Sleep: noSleep, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	req := ports.BuildRequest{JobID: "job-1", Request: &core.FromImageRequest{SourceImageRef: "nginx:1", WritableLayerSize: "1Gi"},
		EnvdData: []byte("envd"), DownloadBaseURL: "http://m"}
	for _, tt := range []struct {
		serviceErr error
		want       error
	}{
		{nil, nil},
		{fmt.Errorf("cap 2: %w", core.ErrBusy), core.ErrBusy},
		{fmt.Errorf("job-1: %w", core.ErrConflict), core.ErrConflict},
		{fmt.Errorf("job-1 is READY: %w", core.ErrNotFound), core.ErrNotFound},
		{&core.FieldError{Field: "request", Reason: "differs"}, core.ErrInvalidArgument},
	} {
		b.err = tt.serviceErr
		err := c.SubmitBuild(context.Background(), req)
		if (tt.want == nil) != (err == nil) || (tt.want != nil && !errors.Is(err, tt.want)) {
			t.Fatalf("service %v -> client %v, want %v", tt.serviceErr, err, tt.want)
		}
	}
	if got := b.got[0]; got.JobID != "job-1" || string(got.EnvdData) != "envd" || got.Request.WritableLayerSize != "1Gi" {
		t.Fatalf("service got %+v", got)
	}
	if err := c.DeleteArtifact(context.Background(), "rfs-1"); err != nil {
		t.Fatalf("delete of a missing artifact: %v", err)
	}

	wrong, _ := tcclient.New(tcclient.Config{BaseURL: tc.URL, Token: "other", Sleep: noSleep, Logger: quiet})
	if err := wrong.SubmitBuild(context.Background(), req); !errors.Is(err, wire.ErrUnauthorized) {
		t.Fatalf("wrong token: %v", err)
	}
}

type reports struct {
	mu  sync.Mutex
	got []ports.StatusReport
	err error
}

func (r *reports) HandleStatusReport(_ context.Context, _ string, rep ports.StatusReport) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, rep)
	return true, r.err
}

func TestReporterAgainstMaster(t *testing.T) {
	rs := &reports{}
	h, err := cubeapi.New(cubeapi.Config{Token: token, Reports: rs, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	master := httptest.NewServer(h)
	defer master.Close()
	c, err := masterclient.New(masterclient.Config{BaseURL: master.URL, Token: token, Logger: quiet,
		Sleep: func(context.Context, time.Duration) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	p := 100
	sha := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	in := ports.StatusReport{
		Update: core.JobUpdate{Status: core.JobBuilt, Phase: core.PhaseReady, Progress: &p, ArtifactID: "rfs-1", ArtifactStatus: "READY",
			Pull: &core.PullProgress{TotalBytes: 10, DownloadedBytes: 10, TotalLayers: 1, CompletedLayers: 1}},
		Artifact: &core.Artifact{ArtifactID: "rfs-1", Ext4SHA256: sha, Ext4SizeBytes: 8 << 20, ObjectKey: "rfs-1/rfs-1.ext4", StorageBackend: "file",
			DownloadToken: "never-sent"},
	}
	if err := c.Report(context.Background(), "job-1", in); err != nil {
		t.Fatal(err)
	}
	got := rs.got[0]
	if got.Update.Status != core.JobBuilt || *got.Update.Progress != 100 || got.Update.Pull.TotalBytes != 10 ||
		got.Artifact.Ext4SHA256 != sha || got.Artifact.Ext4SizeBytes != 8<<20 || got.Artifact.DownloadToken != "" {
		t.Fatalf("master got %+v / %+v", got.Update, got.Artifact)
	}

	rs.err = fmt.Errorf("job-2: %w", core.ErrNotFound)
	if err := c.Report(context.Background(), "job-2", in); !errors.Is(err, core.ErrNotFound) || !masterclient.IsFinal(err) {
		t.Fatalf("unknown job: %v", err)
	}
	if len(rs.got) != 2 {
		t.Fatalf("a final 404 was retried: %d calls", len(rs.got))
	}
}

type artifactRows map[string]*core.Artifact

func (a artifactRows) Get(_ context.Context, id string) (*core.Artifact, error) {
	if r, ok := a[id]; ok {
		return r, nil
	}
	return nil, fmt.Errorf("artifact %s: %w", id, core.ErrNotFound)
}

// TestDownloadHidesWhichArtifactsExist: through the master's download
// proxy, which strips the internal token, an unknown id and a refused token
// get the same answer, whatever headers the caller adds; the master's own
// ArtifactExists, which sends the internal token to the data plane, still
// tells an unknown id (absent) from a refused token (an error).
func TestDownloadHidesWhichArtifactsExist(t *testing.T) {
	ctx := context.Background()
	blobs, err := artifactstore.Open(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer blobs.Close()
	data := []byte("the bytes of rfs-a")
	sum := sha256.Sum256(data)
	sha := hex.EncodeToString(sum[:])
	if err := blobs.Put(ctx, core.ArtifactObjectKey("rfs-a"), bytes.NewReader(data), ports.ObjectInfo{Size: int64(len(data)), SHA256: sha}); err != nil {
		t.Fatal(err)
	}
	rows := artifactRows{"rfs-a": {ArtifactID: "rfs-a", Status: core.ArtifactReady, DownloadToken: "token-a", Ext4SHA256: sha}}
	tc := httptest.NewServer(tcapi.New(tcapi.Config{Token: token, Artifacts: rows, Store: blobs, Logger: quiet}))
	defer tc.Close()
	h, err := cubeapi.New(cubeapi.Config{Token: token, TemplateCenterURL: tc.URL, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	master := httptest.NewServer(h)
	defer master.Close()

	get := func(method, id string, hdr map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, master.URL+core.DownloadPath+"?artifact_id="+id, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := master.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		refusedCode, refusedBody := get(method, "rfs-unknown", nil)
		if refusedCode != http.StatusForbidden {
			t.Errorf("%s of an unknown id: %d %q, want 403", method, refusedCode, refusedBody)
		}
		for _, probe := range []struct {
			name string
			id   string
			hdr  map[string]string
		}{
			{"unknown id, a download token", "rfs-unknown", map[string]string{core.DownloadTokenHeader: "token-a"}},
			{"unknown id, the internal token", "rfs-unknown", map[string]string{auth.Header: token}},
			{"existing id, no token", "rfs-a", nil},
			{"existing id, wrong token", "rfs-a", map[string]string{core.DownloadTokenHeader: "guess"}},
			{"existing id, the internal token", "rfs-a", map[string]string{auth.Header: token}},
		} {
			if code, body := get(method, probe.id, probe.hdr); code != refusedCode || body != refusedBody {
				t.Errorf("%s %s: %d %q, unlike an unknown id's %d %q", method, probe.name, code, body, refusedCode, refusedBody)
			}
		}
		if code, body := get(method, "rfs-a", map[string]string{core.DownloadTokenHeader: "token-a"}); code != http.StatusOK ||
			(method == http.MethodGet && body != string(data)) {
			t.Errorf("%s with the artifact's token: %d %q", method, code, body)
		}
	}

	c, err := tcclient.New(tcclient.Config{BaseURL: tc.URL, Token: token, Logger: quiet,
		Sleep: func(context.Context, time.Duration) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		a       *core.Artifact
		want    bool
		wantErr bool
	}{
		{"present", rows["rfs-a"], true, false},
		{"no row", &core.Artifact{ArtifactID: "rfs-unknown", Status: core.ArtifactReady, DownloadToken: "token-a"}, false, false},
		{"refused token", &core.Artifact{ArtifactID: "rfs-a", Status: core.ArtifactReady, DownloadToken: "guess"}, false, true},
	} {
		ok, err := c.ArtifactExists(ctx, tt.a)
		if ok != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ArtifactExists %s = %v, %v; want %v, error %v", tt.name, ok, err, tt.want, tt.wantErr)
		}
	}
}
