package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/adapters/lock/memlock"
	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/adapters/system"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
	"github.com/cubesandbox/templatecenter/testkit/testimage"
)

// fakeMaster records the status callbacks the data plane sends and applies
// them to the job rows the way the control plane does.
type fakeMaster struct {
	t     *testing.T
	jobs  *control.Service
	mu    sync.Mutex
	seen  map[string][]ports.StatusReport
	token string
}

func (m *fakeMaster) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Cube-Template-Callback-Token") != m.token {
		http.Error(w, "bad token", http.StatusUnauthorized)
		return
	}
	id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/internal/template/jobs/"), "/status")
	rep, err := wire.DecodeStatusReport(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if _, _, err := m.jobs.Report(r.Context(), id, rep.Update); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	m.mu.Lock()
	m.seen[id] = append(m.seen[id], rep)
	m.mu.Unlock()
	w.Write([]byte(`{"status":"ok"}`))
}

func (m *fakeMaster) terminal(jobID string) (ports.StatusReport, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.seen[jobID] {
		if r.Update.Status == core.JobBuilt || r.Update.Status == core.JobFailed {
			return r, true
		}
	}
	return ports.StatusReport{}, false
}

// TestServeBuildsReportsAndServesDownloads runs the real templatecenter
// process against a registry on loopback and a recording master: a build
// request is accepted, reported to BUILT with the artifact metadata, the
// bytes are downloadable with the token (Range, HEAD, 403, 404), and a
// second template with the same spec reuses the artifact.
func TestServeBuildsReportsAndServesDownloads(t *testing.T) {
	reg := testenv.Get(t, testenv.Registry)
	bin := buildBinaries(t)
	dir := t.TempDir()
	dsn := "sqlite://" + filepath.Join(dir, "tc.db")
	ctx := context.Background()

	ref := fmt.Sprintf("%s/e2e/serve:%d", reg, time.Now().UnixNano())
	l, err := testimage.Layer([]testimage.Entry{testimage.Dir("etc", 0o755), testimage.File("etc/motd", 0o644, "hello from the data plane\n")})
	if err != nil {
		t.Fatal(err)
	}
	img, err := testimage.Image([]v1.Layer{l}, v1.Config{Cmd: []string{"/bin/true"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testimage.Push(ref, img); err != nil {
		t.Fatal(err)
	}

	st, err := entstore.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	svc := &control.Service{Store: st, Locker: memlock.New(), IDs: system.IDs{}}
	master := &fakeMaster{t: t, jobs: svc, seen: map[string][]ports.StatusReport{}, token: "e2e-secret"}
	ms := httptest.NewServer(master)
	defer ms.Close()

	addr := freeAddr(t)
	cmd := exec.Command(filepath.Join(bin, "templatecenter"), "serve", "--listen", addr)
	cmd.Env = append(os.Environ(),
		"CUBE_TEMPLATE_CENTER_DB_DSN="+dsn,
		"CUBE_TEMPLATE_CENTER_ARTIFACT_STORE_DIR="+filepath.Join(dir, "store"),
		"CUBE_TEMPLATE_CENTER_ARTIFACT_WORK_DIR="+filepath.Join(dir, "work"),
		"CUBE_TEMPLATE_CENTER_PLUGIN_DIR="+bin,
		"CUBE_TEMPLATE_CENTER_BUILDER=ext4stream",
		"CUBE_TEMPLATE_CENTER_INSECURE_REGISTRIES="+reg,
		"CUBE_TEMPLATE_CALLBACK_TOKEN="+master.token,
		"CUBE_MASTER_ADDR="+ms.URL)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		if t.Failed() {
			t.Logf("templatecenter log:\n%s", logs.String())
		}
	}()
	base := "http://" + addr
	waitHealthy(t, base+"/health")

	submit := func(templateID string) (*core.Job, ports.StatusReport) {
		t.Helper()
		req := &core.FromImageRequest{SourceImageRef: ref, WritableLayerSize: "1Gi", TemplateID: templateID}
		res, err := svc.SubmitFromImage(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := json.Marshal(wire.BuildRequest{JobID: res.Job.JobID, Request: req, DownloadBaseURL: base})
		code, out := post(t, base+wire.PathBuild, master.token, body)
		if code != http.StatusOK {
			t.Fatalf("POST build: %d %s", code, out)
		}
		// The same job again is in flight or no longer PENDING.
		if code, _ := post(t, base+wire.PathBuild, master.token, body); code != http.StatusConflict && code != http.StatusNotFound {
			t.Fatalf("second POST build: %d, want 409 or 404", code)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for time.Now().Before(deadline) {
			if r, ok := master.terminal(res.Job.JobID); ok {
				return res.Job, r
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("no terminal report for job %s", res.Job.JobID)
		return nil, ports.StatusReport{}
	}

	job, rep := submit("tpl-serve-a")
	if rep.Update.Status != core.JobBuilt || rep.Artifact == nil {
		t.Fatalf("terminal report %+v, want BUILT with artifact metadata", rep.Update)
	}
	a, err := st.Artifacts().Get(ctx, rep.Artifact.ArtifactID)
	if err != nil {
		t.Fatal(err)
	}
	if a.Status != core.ArtifactReady || a.Ext4SHA256 == "" || a.Ext4SizeBytes%(2<<20) != 0 || a.ObjectKey == "" {
		t.Fatalf("artifact row %+v", a)
	}
	got, err := st.Jobs().Get(ctx, job.JobID)
	if err != nil || got.Status != core.JobBuilt || got.ArtifactID != a.ArtifactID || got.SourceImageDigest == "" {
		t.Fatalf("job row after BUILT: %+v (%v)", got, err)
	}

	// The master mints the download token's seed when it first registers
	// the artifact; nodes are given the token derived from it with the
	// callback token, and the seed itself (all a copy of the database
	// shows) downloads nothing.
	seed := core.NewDownloadSeed("tok-123")
	if _, err := st.Artifacts().Update(ctx, a.ArtifactID, func(x *core.Artifact) error { x.DownloadToken = seed; return nil }); err != nil {
		t.Fatal(err)
	}
	dl := base + "/cube/template/artifact/download?artifact_id=" + a.ArtifactID
	checkDownload(t, dl, a, core.NewDownloadTokens(master.token).For(a.ArtifactID, seed), seed)

	// A second template with the same spec reuses the READY artifact.
	_, rep2 := submit("tpl-serve-b")
	if rep2.Update.Status != core.JobBuilt || rep2.Artifact == nil || rep2.Artifact.ArtifactID != a.ArtifactID {
		t.Fatalf("second build: %+v, want BUILT reusing %s", rep2.Update, a.ArtifactID)
	}
	if a2, _ := st.Artifacts().Get(ctx, a.ArtifactID); a2.Ext4SHA256 != a.Ext4SHA256 {
		t.Fatal("reuse changed the artifact")
	}

	// The data plane's delete removes bytes and row, and is idempotent.
	if _, err := st.Artifacts().Update(ctx, a.ArtifactID, func(x *core.Artifact) error { return x.MoveTo(core.ArtifactCleanupPending) }); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]string{"artifact_id": a.ArtifactID})
	for i := 0; i < 2; i++ {
		if code, out := post(t, base+wire.PathArtifactDelete, master.token, body); code != http.StatusOK {
			t.Fatalf("delete #%d: %d %s", i+1, code, out)
		}
	}
	if _, err := st.Artifacts().Get(ctx, a.ArtifactID); err == nil {
		t.Fatal("artifact row still there after delete")
	}
	// Its token went with the row: refused like any wrong token (403), so
	// ids cannot be probed; the shared token learns that it is gone (404).
	for _, c := range []struct {
		name   string
		header string
		want   int
	}{
		{"old token", "", http.StatusForbidden},
		{"shared token", master.token, http.StatusNotFound},
	} {
		req, err := http.NewRequest(http.MethodGet, dl+"&token="+core.NewDownloadTokens(master.token).For(a.ArtifactID, seed), nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.header != "" {
			req.Header.Set(auth.Header, c.header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("download after delete, %s: %v", c.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Fatalf("download after delete, %s: %d, want %d", c.name, resp.StatusCode, c.want)
		}
	}
}

func checkDownload(t *testing.T, dl string, a *core.Artifact, token, seed string) {
	t.Helper()
	cases := []struct {
		name, method, token, rng string
		status                   int
		length                   int64
	}{
		{"full", http.MethodGet, token, "", http.StatusOK, a.Ext4SizeBytes},
		{"head", http.MethodHead, token, "", http.StatusOK, a.Ext4SizeBytes},
		{"range", http.MethodGet, token, "bytes=1024-2047", http.StatusPartialContent, 1024},
		{"empty suffix range", http.MethodGet, token, "bytes=-0", http.StatusRequestedRangeNotSatisfiable, -1},
		{"bad token", http.MethodGet, "nope", "", http.StatusForbidden, -1},
		{"no token", http.MethodGet, "", "", http.StatusForbidden, -1},
		{"the stored seed (a copy of the database)", http.MethodGet, seed, "", http.StatusForbidden, -1},
	}
	for _, c := range cases {
		u := dl
		if c.token != "" {
			u += "&token=" + c.token
		}
		req, _ := http.NewRequest(c.method, u, nil)
		if c.rng != "" {
			req.Header.Set("Range", c.rng)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Fatalf("%s: status %d, want %d", c.name, resp.StatusCode, c.status)
		}
		if c.length >= 0 && resp.ContentLength != c.length {
			t.Fatalf("%s: Content-Length %d, want %d", c.name, resp.ContentLength, c.length)
		}
		if c.method == http.MethodGet && c.status == http.StatusOK && n != a.Ext4SizeBytes {
			t.Fatalf("%s: read %d bytes", c.name, n)
		}
		if c.status < 300 && strings.Trim(resp.Header.Get("ETag"), `"`) != a.Ext4SHA256 {
			t.Fatalf("%s: ETag %q, want the sha256", c.name, resp.Header.Get("ETag"))
		}
	}
	// An unknown id answers like a wrong token, so ids cannot be probed.
	resp, err := http.Get(strings.Replace(dl, "artifact_id=", "artifact_id=rfs-000000000000000000000000", 1) + "&token=tok-123")
	if err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("unknown artifact: %v %v, want 403", resp.StatusCode, err)
	}
}

func post(t *testing.T, url, token string, body []byte) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("X-Cube-Template-Callback-Token", token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitHealthy(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s never became healthy", url)
}
