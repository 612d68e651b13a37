package cubeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// The answers upstream's newest cubemastercli decodes
// (CubeMaster/cmd/cubemastercli/commands/cubebox/template.go), with the
// JSON keys it reads: what this master answers must fill them.
type (
	upRet struct {
		RetCode int    `json:"ret_code"`
		RetMsg  string `json:"ret_msg"`
	}
	upJob struct {
		JobID          string `json:"job_id"`
		TemplateID     string `json:"template_id"`
		Status         string `json:"status"`
		Phase          string `json:"phase"`
		Progress       int    `json:"progress"`
		ArtifactID     string `json:"artifact_id"`
		Operation      string `json:"operation"`
		ErrorMessage   string `json:"error_message"`
		TemplateStatus string `json:"template_status"`
	}
	upJobResponse struct {
		RequestID string `json:"requestID"`
		Ret       *upRet `json:"ret"`
		Job       *upJob `json:"job"`
	}
	upSummary struct {
		TemplateID     string `json:"template_id"`
		Status         string `json:"status"`
		LastError      string `json:"last_error"`
		DisplayName    string `json:"display_name"`
		StorageBackend string `json:"storage_backend"`
		Backend        string `json:"backend"`
		CreatedAt      string `json:"created_at"`
		ImageInfo      string `json:"image_info"`
		JobID          string `json:"job_id"`
	}
	upList struct {
		Ret  *upRet      `json:"ret"`
		Data []upSummary `json:"data"`
	}
	upTemplate struct {
		Ret         *upRet `json:"ret"`
		TemplateID  string `json:"template_id"`
		Status      string `json:"status"`
		DisplayName string `json:"display_name"`
		Backend     string `json:"backend"`
		JobID       string `json:"job_id"`
		Replicas    []struct {
			NodeID string `json:"node_id"`
			Status string `json:"status"`
		} `json:"replicas"`
		CreateRequest *struct {
			Annotations       map[string]string `json:"annotations"`
			Backend           string            `json:"backend"`
			CubeNetworkConfig *struct {
				AllowInternetAccess *bool    `json:"allowInternetAccess"`
				AllowOut            []string `json:"allowOut"`
			} `json:"cube_network_config"`
		} `json:"create_request"`
		CubeEgressCABaked          bool   `json:"cube_egress_ca_baked"`
		CubeEgressCAFingerprint    string `json:"cube_egress_ca_fingerprint"`
		CubeEgressCATargetsWritten int    `json:"cube_egress_ca_targets_written"`
	}
	upBuildStatus struct {
		Ret        *upRet `json:"ret"`
		BuildID    string `json:"build_id"`
		TemplateID string `json:"template_id"`
		Status     string `json:"status"`
		Progress   int    `json:"progress"`
	}
	upPreview struct {
		Ret            *upRet          `json:"ret"`
		APIRequest     json.RawMessage `json:"api_request"`
		MergedRequest  json.RawMessage `json:"merged_request"`
		CubeletRequest json.RawMessage `json:"cubelet_request"`
	}
)

// upstreamCLI sends requests the way upstream's newest cubemastercli does
// (doHttpReqWithContentType): the X-Caller header, JSON bodies (or its
// multipart form), a non-200 HTTP status and a ret_code other than 200 are
// errors.
type upstreamCLI struct {
	t    *testing.T
	base string
}

func (c *upstreamCLI) do(method, path string, body io.Reader, ctype string, out any) error {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("X-Caller", "mastercli")
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status code is not 200, but %d", resp.StatusCode)
	}
	var env struct {
		Ret *upRet `json:"ret"`
	}
	if err := json.Unmarshal(raw, &env); err != nil || env.Ret == nil {
		return fmt.Errorf("empty response: %s", raw)
	}
	if env.Ret.RetCode != 200 {
		return fmt.Errorf("ret_code %d: %s", env.Ret.RetCode, env.Ret.RetMsg)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			c.t.Fatalf("%s %s: %v: %s", method, path, err, raw)
		}
	}
	return nil
}

func (c *upstreamCLI) json(method, path string, body, out any) error {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	return c.do(method, path, rd, "", out)
}

func (c *upstreamCLI) must(err error) {
	c.t.Helper()
	if err != nil {
		c.t.Fatal(err)
	}
}

// TestUpstreamNewestCLIWireFormat drives every template subcommand and
// flag of upstream's newest cubemastercli, as it puts them on the wire,
// against this master's router over the real control service (the nodes
// and the data plane are recording fakes; the test plays the data plane's
// BUILT report).
func TestUpstreamNewestCLIWireFormat(t *testing.T) {
	e := newRealEnv(t)
	var mu sync.Mutex
	builds := map[string]ports.BuildRequest{}
	e.dp.SubmitBuildFunc = func(_ context.Context, br ports.BuildRequest) error {
		mu.Lock()
		defer mu.Unlock()
		builds[br.JobID] = br
		return nil
	}
	srv := httptest.NewServer(e.h)
	t.Cleanup(srv.Close)
	cli := &upstreamCLI{t: t, base: srv.URL}
	fps := 0
	// build plays the template center for a submitted job: RUNNING, then
	// BUILT with an artifact (the CA baked when caFP is set).
	build := func(jobID, caFP string) {
		t.Helper()
		fps++
		ctx := context.Background()
		// The fingerprint the data plane computes from the job's request
		// and what it injected, which the master checks.
		digest := "sha256:" + strings.Repeat(fmt.Sprintf("%02x", 0x30+fps), 32)
		job, err := e.store.Jobs().Get(ctx, jobID)
		if err != nil {
			t.Fatal(err)
		}
		req, err := core.DecodeRequestJSON(job.RequestJSON)
		if err != nil {
			t.Fatal(err)
		}
		n, err := core.NormalizeFromImageRequest(req, nil)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		envdSHA := builds[jobID].EnvdSHA256
		mu.Unlock()
		inputs := &core.BuildInputs{SourceImageDigest: digest, CAFingerprint: caFP, EnvdSHA256: envdSHA,
			BuilderFormat: core.BuilderFormatVersion, Builder: "seed/1"}
		fp, err := core.FingerprintOf(n, *inputs)
		if err != nil {
			t.Fatal(err)
		}
		aid := "rfs-" + fp[:24]
		running := core.Progress(core.JobRunning, core.PhaseUnpacking, 20)
		running.ArtifactID, running.Fingerprint, running.SourceImageDigest = aid, fp, digest
		if _, err := e.svc.HandleStatusReport(ctx, jobID, ports.StatusReport{Update: running}); err != nil {
			t.Fatal(err)
		}
		built := core.Progress(core.JobBuilt, core.PhaseReady, 100)
		built.ArtifactID, built.ArtifactStatus, built.Fingerprint = aid, "READY", fp
		art := &core.Artifact{ArtifactID: aid, Fingerprint: fp, SourceImageDigest: digest, DownloadBaseURL: "http://master:8089",
			Ext4SHA256: seedSHA, Ext4SizeBytes: 64 << 20, ImageConfigJSON: `{"Cmd":["sh"]}`, StorageBackend: "file",
			ObjectKey: aid + "/" + aid + ".ext4", Status: core.ArtifactReady, CubeEgressCABaked: caFP != "",
			CubeEgressCAFingerprint: caFP, CubeEgressCATargetsWritten: map[bool]int64{true: 2}[caFP != ""]}
		if _, err := e.svc.HandleStatusReport(ctx, jobID, ports.StatusReport{Update: built, Artifact: art, Inputs: inputs}); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := e.svc.Wait(wctx); err != nil {
			t.Fatal(err)
		}
	}
	// watch is what create-from-image and redo do by default (and
	// `watch --job-id`): poll GET from-image?job_id= until READY or FAILED.
	watch := func(jobID string) upJob {
		t.Helper()
		for range 50 {
			var r upJobResponse
			cli.must(cli.json(http.MethodGet, "/cube/template/from-image?job_id="+url.QueryEscape(jobID), nil, &r))
			if r.Job.Status == "READY" || r.Job.Status == "FAILED" {
				return *r.Job
			}
			time.Sleep(10 * time.Millisecond) // the poll interval (--interval)
		}
		t.Fatalf("job %s never ended", jobID)
		return upJob{}
	}

	// create-from-image with every JSON flag: no --template-id (the server
	// generates it), --alias, --backend, --enable-ivshmem, --with-cube-ca
	// (materialised as true), the network flags, the container overrides.
	allow := false
	var created upJobResponse
	cli.must(cli.json(http.MethodPost, "/cube/template/from-image", map[string]any{
		"requestID": "req-cfi-1", "source_image_ref": "registry.example/web:1", "alias": "web",
		"writable_layer_size": "20Gi", "distribution_scope": []string{"node-1"}, "exposed_ports": []int32{9000},
		"instance_type": "cubebox", "network_type": "tap", "backend": "s3",
		"registry_username": "bob", "registry_password": "hunter2",
		"container_overrides": map[string]any{"command": []string{"/bin/sh"}, "args": []string{"-c", "serve"},
			"envs": []map[string]string{{"key": "A", "value": "1"}}, "dns_config": map[string]any{"servers": []string{"8.8.8.8"}},
			"resources": map[string]string{"cpu": "4000m", "mem": "2000Mi"},
			"probe": map[string]any{"probe_handler": map[string]any{"http_get": map[string]any{"path": "/health", "port": 9000, "host": ""}},
				"timeout_ms": 30000, "period_ms": 500, "failure_threshold": 60, "success_threshold": 1}},
		"with_cube_ca": true, "enable_ivshmem": true,
		"cube_network_config": map[string]any{"allowInternetAccess": &allow, "allowOut": []string{"10.0.0.0/8"}, "denyOut": []string{"0.0.0.0/0"}},
	}, &created))
	first := created.Job
	if !strings.HasPrefix(first.TemplateID, "tpl-") || first.JobID == "" || first.Status != "PENDING" {
		t.Fatalf("create answered %+v", first)
	}
	build(first.JobID, strings.Repeat("c", 64))
	if j := watch(first.JobID); j.Status != "READY" {
		t.Fatalf("create ended %+v", j)
	}

	// info <alias> --include-request: the template with its job, alias,
	// backend, the CA fields, and the generated request with the
	// ivshmem annotation, the backend and the network policy.
	var info upTemplate
	cli.must(cli.json(http.MethodGet, "/cube/template?template_id=web&include_request=true", nil, &info))
	if info.TemplateID != first.TemplateID || info.DisplayName != "web" || info.JobID != first.JobID || info.Backend != "s3" ||
		!info.CubeEgressCABaked || info.CubeEgressCATargetsWritten != 2 || len(info.Replicas) != 1 || info.CreateRequest == nil {
		t.Fatalf("info = %+v", info)
	}
	if cr := info.CreateRequest; cr.Annotations[core.AnnotationEnableIvshmem] != "true" || cr.Backend != "s3" ||
		cr.CubeNetworkConfig == nil || *cr.CubeNetworkConfig.AllowInternetAccess || cr.CubeNetworkConfig.AllowOut[0] != "10.0.0.0/8" {
		t.Fatalf("create_request = %+v", cr)
	}

	// create-from-image --enable-inject-envd --envd-path F, a second build
	// asking for the same alias, --with-cube-ca=false: the multipart form.
	envd := append([]byte{0x7f, 'E', 'L', 'F'}, bytes.Repeat([]byte{1}, 4096)...)
	reqJSON, _ := json.Marshal(map[string]any{"requestID": "req-cfi-2", "source_image_ref": "registry.example/web:2", "alias": "web",
		"writable_layer_size": "20Gi", "instance_type": "cubebox", "network_type": "tap", "with_cube_ca": false,
		"container_overrides": map[string]any{"resources": map[string]string{"cpu": "2000m", "mem": "2000Mi"},
			"annotations": map[string]string{core.AnnotationInjectEnvd: "true"}}})
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	fw, _ := mw.CreateFormField("request")
	fw.Write(reqJSON)
	ff, _ := mw.CreateFormFile("envd", "envd")
	ff.Write(envd)
	mw.Close()
	var second upJobResponse
	cli.must(cli.do(http.MethodPost, "/cube/template/from-image", &form, mw.FormDataContentType(), &second))
	mu.Lock()
	br := builds[second.Job.JobID]
	mu.Unlock()
	if !bytes.Equal(br.EnvdData, envd) || len(br.EnvdSHA256) != 64 || br.Request.WithCubeCA == nil || *br.Request.WithCubeCA {
		t.Fatalf("the data plane got %d envd bytes, sha %q, with_cube_ca %v", len(br.EnvdData), br.EnvdSHA256, br.Request.WithCubeCA)
	}
	build(second.Job.JobID, "")
	if j := watch(second.Job.JobID); j.Status != "READY" || !strings.Contains(j.ErrorMessage, `alias "web" moved here`) {
		t.Fatalf("second create ended %+v", j)
	}

	// ls (and -o wide, and --json: the same answer): ALIAS, BACKEND, JOB_ID.
	var list upList
	cli.must(cli.json(http.MethodGet, "/cube/template", nil, &list))
	rows := map[string]upSummary{}
	for _, s := range list.Data {
		rows[s.TemplateID] = s
	}
	if r := rows[second.Job.TemplateID]; r.DisplayName != "web" || r.JobID != second.Job.JobID || r.CreatedAt == "" || r.ImageInfo == "" {
		t.Fatalf("ls row of the new template = %+v", r)
	}
	if r := rows[first.TemplateID]; r.DisplayName != "" || r.JobID != first.JobID || r.Backend != "s3" || r.StorageBackend != "s3" {
		t.Fatalf("ls row of the old template = %+v", r)
	}

	// set-alias <id> --alias web moves it back (first is READY); --clear
	// sends {} (alias omitted).
	var moved upTemplate
	cli.must(cli.json(http.MethodPut, "/cube/template/"+first.TemplateID+"/alias", map[string]any{"alias": "web"}, &moved))
	if moved.TemplateID != first.TemplateID || moved.DisplayName != "web" {
		t.Fatalf("set-alias answered %+v", moved)
	}
	var cleared upTemplate
	cli.must(cli.json(http.MethodPut, "/cube/template/web/alias", map[string]any{}, &cleared))
	if cleared.TemplateID != first.TemplateID || cleared.DisplayName != "" {
		t.Fatalf("set-alias --clear answered %+v", cleared)
	}
	cli.must(cli.json(http.MethodPut, "/cube/template/"+second.Job.TemplateID+"/alias", map[string]any{"alias": "api"}, nil))

	// redo <alias> --node node-1 --failed-only --wait, then watched.
	var redo upJobResponse
	cli.must(cli.json(http.MethodPost, "/cube/template/redo", map[string]any{"requestID": "req-redo", "template_id": "api",
		"distribution_scope": []string{"node-1"}, "wait": true}, &redo))
	if redo.Job.TemplateID != second.Job.TemplateID || redo.Job.Operation != "REDO" {
		t.Fatalf("redo answered %+v", redo.Job)
	}
	if j := watch(redo.Job.JobID); j.Status != "READY" {
		t.Fatalf("redo ended %+v", j)
	}

	// status --job-id, build-status / build-watch --build-id (the job id).
	var status upJobResponse
	cli.must(cli.json(http.MethodGet, "/cube/template/from-image?job_id="+redo.Job.JobID, nil, &status))
	var bs upBuildStatus
	cli.must(cli.json(http.MethodGet, "/cube/template/build/"+redo.Job.JobID+"/status", nil, &bs))
	if status.Job.Status != "READY" || bs.BuildID != redo.Job.JobID || bs.Status != "ready" || bs.Progress != 100 {
		t.Fatalf("status %+v, build-status %+v", status.Job, bs)
	}

	// render -f req.json --template-id <alias>: POST /cube/sandbox/preview.
	var preview upPreview
	cli.must(cli.json(http.MethodPost, "/cube/sandbox/preview", map[string]any{"requestID": "req-render",
		"annotations": map[string]string{core.AnnotationTemplateID: "api", core.AnnotationAppSnapshotVersion: "v2", core.AnnotationTemplateVersion: "v2"}}, &preview))
	if len(preview.APIRequest) == 0 || len(preview.MergedRequest) == 0 || len(preview.CubeletRequest) == 0 {
		t.Fatalf("preview = %+v", preview)
	}

	// create -f req.json --node node-1 (a template from a sandbox request).
	var sync upTemplate
	cli.must(cli.json(http.MethodPost, "/cube/template", map[string]any{"requestID": "req-create",
		"annotations": map[string]string{core.AnnotationTemplateID: "tpl-sync", core.AnnotationAppSnapshotCreate: "true",
			core.AnnotationAppSnapshotVersion: "v2", core.AnnotationTemplateVersion: "v2"},
		"distribution_scope": []string{"node-1"}, "containers": []map[string]any{{"name": "c", "image": map[string]any{"image": "nginx"}}}}, &sync))
	if sync.TemplateID != "tpl-sync" || len(sync.Replicas) != 1 {
		t.Fatalf("create answered %+v", sync)
	}

	// delete a b (batch, by alias and by id): one DELETE each, RequestID
	// spelled as upstream spells it.
	for _, key := range []string{"api", first.TemplateID, "tpl-sync"} {
		cli.must(cli.json(http.MethodDelete, "/cube/template", map[string]any{"RequestID": "req-del-" + key, "template_id": key}, nil))
	}
	if err := cli.json(http.MethodGet, "/cube/template?template_id=api", nil, nil); err == nil || !strings.Contains(err.Error(), "130404") {
		t.Fatalf("info of a deleted template: %v", err)
	}

	// commit: sandboxes are not this service's; the route is not served,
	// and upstream's CLI reports the status as an error.
	err := cli.json(http.MethodPost, "/cube/sandbox/commit", map[string]any{"requestID": "r", "sandbox_id": "sb-1"}, nil)
	if err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("commit: %v", err)
	}
}
