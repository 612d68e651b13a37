package tcapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/lock/memlock"
	"github.com/cubesandbox/templatecenter/adapters/store/memstore"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/data"
	"github.com/cubesandbox/templatecenter/core/pipeline"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/portsmock"
	"github.com/cubesandbox/templatecenter/testkit/testca"
)

// heldRunner is a build that runs until released, so that builds stay in
// flight while the test submits more.
type heldRunner struct {
	mu      sync.Mutex
	release chan struct{}
	started chan struct{}
	inputs  []pipeline.Input
}

func (h *heldRunner) Run(ctx context.Context, in pipeline.Input, _ func(pipeline.Event)) (*pipeline.Result, error) {
	h.mu.Lock()
	h.inputs = append(h.inputs, in)
	h.mu.Unlock()
	h.started <- struct{}{}
	select {
	case <-h.release:
	case <-ctx.Done():
	}
	return nil, context.Canceled
}

// TestBuildFromOldAndNewMasters: during a rolling upgrade the template
// center takes builds from every master in the fleet: our master before
// this release (no with_cube_ca, no CA), upstream's newest master (its own
// request_json: alias, with_cube_ca, enable_ivshmem, cube_network_config,
// backend, envd), and our master now (backend and enable_ivshmem stored,
// an explicit with_cube_ca=true that is not, the CA in cube_egress_ca_pem). Each is accepted when it matches the job row its
// master wrote; a second submit of a job in flight is 409, a submit at the
// concurrency cap 429, a request that differs from the stored one 400, all
// behind the callback token (401 without it).
func TestBuildFromOldAndNewMasters(t *testing.T) {
	envd := append([]byte("\x7fELF"), make([]byte, 64)...)
	envdB64 := base64.StdEncoding.EncodeToString(envd)
	ca, _ := json.Marshal(string(testca.PEM(1)))
	masters := []struct {
		name, job, stored, body string
		wantCA                  bool
	}{
		{name: "our master before the upgrade", job: "job-old",
			stored: `{"source_image_ref":"registry.example/app:1","template_id":"tpl-old","instance_type":"cubebox","network_type":"tap","writable_layer_size":"20Gi","platform":"linux/amd64"}`,
			body:   `{"job_id":"job-old","request":{"requestID":"r","source_image_ref":"registry.example/app:1","template_id":"tpl-old","writable_layer_size":"20Gi"},"download_base_url":"http://m:8089"}`},
		{name: "upstream's newest master", job: "job-up",
			stored: `{"source_image_ref":"registry.example/app:2","template_id":"tpl-up","alias":"web","instance_type":"cubebox","network_type":"tap",` +
				`"cube_network_config":{"allowInternetAccess":false},"writable_layer_size":"20Gi","backend":"s3",` +
				`"container_overrides":{"annotations":{"cube.master.inject_envd":"true"}},"with_cube_ca":true,"enable_ivshmem":true}`,
			body: `{"job_id":"job-up","request":{"requestID":"r2","source_image_ref":"registry.example/app:2","template_id":"tpl-up","alias":"web",` +
				`"cube_network_config":{"allowInternetAccess":false},"writable_layer_size":"20Gi","backend":"s3","instance_type":"cubebox","network_type":"tap",` +
				`"container_overrides":{"annotations":{"cube.master.inject_envd":"true"}},"with_cube_ca":true,"enable_ivshmem":true},` +
				`"download_base_url":"http://m:8089","envd_sha256":"` + sum(envd) + `","envd_data":"` + envdB64 + `"}`},
		{name: "our master now", job: "job-new",
			stored: `{"source_image_ref":"registry.example/app:3","template_id":"tpl-new","instance_type":"cubebox","network_type":"tap","writable_layer_size":"20Gi",` +
				`"platform":"linux/amd64","backend":"xfs","enable_ivshmem":true}`,
			body: `{"job_id":"job-new","request":{"requestID":"r3","source_image_ref":"registry.example/app:3","template_id":"tpl-new","writable_layer_size":"20Gi",` +
				`"backend":"xfs","enable_ivshmem":true,"with_cube_ca":true},"cube_egress_ca_pem":` + string(ca) + `}`, wantCA: true},
	}
	st := memstore.New()
	ctx := context.Background()
	for _, m := range masters {
		if err := st.Jobs().Create(ctx, &core.Job{JobID: m.job, TemplateID: "tpl-" + strings.TrimPrefix(m.job, "job-"), AttemptNo: 1,
			Operation: core.OpCreate, Status: core.JobPending, Phase: core.PhasePulling, RequestJSON: m.stored,
			ActiveKey: core.ActiveKeyFromImage("tpl-" + strings.TrimPrefix(m.job, "job-"))}); err != nil {
			t.Fatal(err)
		}
	}
	runner := &heldRunner{release: make(chan struct{}), started: make(chan struct{}, 8)}
	exec := &data.Executor{Store: st, Locker: memlock.New(), Pipeline: runner, Artifacts: &portsmock.ArtifactStoreMock{},
		Reporter: &portsmock.StatusReporterMock{ReportFunc: func(context.Context, string, ports.StatusReport) error { return nil }},
		Config:   data.ExecutorConfig{MaxConcurrent: 3, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	t.Cleanup(func() {
		close(runner.release)
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		exec.Shutdown(sctx)
	})
	h := New(Config{Token: testToken, Builds: exec})

	for _, m := range masters {
		rec := postJSON(t, h, "/tc/api/v1/build", m.body)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: HTTP %d %s, want 200", m.name, rec.Code, rec.Body.String())
		}
	}
	for _, m := range masters {
		if rec := postJSON(t, h, "/tc/api/v1/build", m.body); rec.Code != http.StatusConflict {
			t.Fatalf("%s again while in flight: HTTP %d %s, want 409", m.name, rec.Code, rec.Body.String())
		}
	}
	// What each build got: the CA only from the master that sent it, the
	// envd only from the one that opted in.
	for range masters {
		<-runner.started
	}
	runner.mu.Lock()
	for _, in := range runner.inputs {
		req := in.Request.Request()
		switch req.TemplateID {
		case "tpl-new":
			if in.Inject.CA == nil || req.EnableIvshmem == nil || req.Backend != "xfs" || !core.WantsCubeCA(req) {
				t.Errorf("our master's build: %+v %+v", req, in.Inject)
			}
		case "tpl-up":
			if string(in.Inject.Envd) != string(envd) || req.Alias != "web" || !core.WantsCubeCA(req) {
				t.Errorf("upstream's build: %+v", req)
			}
		case "tpl-old":
			if in.Inject.CA != nil || in.Inject.Envd != nil {
				t.Errorf("old master's build got %+v", in.Inject)
			}
		}
	}
	if len(runner.inputs) != 3 {
		t.Errorf("%d builds ran, want 3", len(runner.inputs))
	}
	runner.mu.Unlock()

	// At the cap (three in flight), a fourth job is 429.
	if err := st.Jobs().Create(ctx, &core.Job{JobID: "job-4", TemplateID: "tpl-4", AttemptNo: 1, Operation: core.OpCreate,
		Status: core.JobPending, Phase: core.PhasePulling, ActiveKey: core.ActiveKeyFromImage("tpl-4"),
		RequestJSON: `{"source_image_ref":"registry.example/app:4","template_id":"tpl-4","writable_layer_size":"1Gi"}`}); err != nil {
		t.Fatal(err)
	}
	body4 := `{"job_id":"job-4","request":{"source_image_ref":"registry.example/app:4","template_id":"tpl-4","writable_layer_size":"1Gi"}}`
	if rec := postJSON(t, h, "/tc/api/v1/build", body4); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("at the cap: HTTP %d %s, want 429", rec.Code, rec.Body.String())
	}
	// A payload that is not what the master stored: 400, naming request_json.
	changed := strings.Replace(body4, "app:4", "app:5", 1)
	if rec := postJSON(t, h, "/tc/api/v1/build", changed); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "request") {
		t.Fatalf("a changed payload: HTTP %d %s, want 400", rec.Code, rec.Body.String())
	}
	// The gate: no token, no build.
	if rec := do(t, h, call{method: http.MethodPost, target: "/tc/api/v1/build", body: strings.NewReader(body4),
		header: map[string]string{"Content-Type": "application/json"}}); rec.Code != http.StatusUnauthorized {
		t.Fatalf("without the token: HTTP %d, want 401", rec.Code)
	}
}
