package cubeapi

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// TestBuilderReachesTheAPI: the builder a BUILT report names (the
// builder's Format among the fingerprint's inputs, which the master checks
// against the job's request) is recorded on the artifact row and answered
// as "builder" by every read the console makes: a paged listing, one
// template, its job's artifact and the artifact itself. An artifact whose
// builder is not known (built before it was recorded, or by upstream)
// answers no builder; the unpaged listing stays upstream's answer. With
// rowFirst the data plane already wrote the READY row without a builder
// (one from before it was recorded): the report completes it.
func TestBuilderReachesTheAPI(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      func(testing.TB) *realEnv
		rowFirst bool
	}{{"memory", newRealEnv, false}, {"sqlite", newSQLEnv, false}, {"memory/row-without-builder", newRealEnv, true}, {"sqlite/row-without-builder", newSQLEnv, true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.env(t)
			ctx := context.Background()
			const builder = "ext4stream/3"
			req := &core.FromImageRequest{RequestID: "r-built", SourceImageRef: "registry.example/app:2",
				TemplateID: "tpl-built", WritableLayerSize: "20Gi"}
			job, err := e.svc.CreateFromImage(ctx, req, "http://master:8089")
			if err != nil {
				t.Fatal(err)
			}
			digest := "sha256:" + seedSHA
			inputs := &core.BuildInputs{SourceImageDigest: digest, BuilderFormat: core.BuilderFormatVersion, Builder: builder}
			n, err := core.NormalizeFromImageRequest(req, nil)
			if err != nil {
				t.Fatal(err)
			}
			fp, err := core.FingerprintOf(n, *inputs)
			if err != nil {
				t.Fatal(err)
			}
			aid, err := core.ArtifactIDFor(fp)
			if err != nil {
				t.Fatal(err)
			}
			// The reports arrive through the callback route, encoded as the
			// data plane's client encodes them.
			running := core.Progress(core.JobRunning, core.PhaseUnpacking, 20)
			running.ArtifactID, running.Fingerprint, running.SourceImageDigest = aid, fp, digest
			e.report(t, job.JobID, ports.StatusReport{Update: running})
			meta := &core.Artifact{
				ArtifactID: aid, Fingerprint: fp, SourceImageDigest: digest, DownloadBaseURL: "http://master:8089",
				Ext4SHA256: seedSHA, Ext4SizeBytes: 64 << 20, ImageConfigJSON: `{"Cmd":["sh"]}`, StorageBackend: "file",
				ObjectKey: core.ArtifactObjectKey(aid), Status: core.ArtifactReady}
			if tc.rowFirst {
				row := *meta
				row.DownloadToken = "dk1.row-first"
				if err := e.store.Artifacts().Create(ctx, &row); err != nil {
					t.Fatal(err)
				}
			}
			built := core.Progress(core.JobBuilt, core.PhaseReady, 100)
			built.ArtifactID, built.ArtifactStatus, built.Fingerprint = aid, "READY", fp
			e.report(t, job.JobID, ports.StatusReport{Update: built, Inputs: inputs, Artifact: meta})
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			if err := e.svc.Wait(wctx); err != nil {
				t.Fatal(err)
			}
			if a, err := e.store.Artifacts().Get(ctx, aid); err != nil || a.Status != core.ArtifactReady || a.Builder != builder {
				t.Fatalf("artifact row %+v, %v; want READY with builder %s", a, err, builder)
			}
			// tpl-two's artifact stands for one built before the builder
			// was recorded.
			if _, err := e.store.Artifacts().Update(ctx, e.artifactOf(t, "tpl-two"), func(a *core.Artifact) error { a.Builder = ""; return nil }); err != nil {
				t.Fatal(err)
			}

			var list struct {
				Data []map[string]any `json:"data"`
			}
			e.get(t, "/cube/template?limit=50", &list)
			got := map[string]any{}
			for _, it := range list.Data {
				got[it["template_id"].(string)] = it["builder"]
			}
			want := map[string]any{"tpl-built": builder, "tpl-seed": "seed/1", "tpl-two": nil, "tpl-pending": nil}
			for id, w := range want {
				if got[id] != w {
					t.Errorf("paged listing: %s has builder %v, want %v (all: %v)", id, got[id], w, got)
				}
			}
			var whole struct {
				Data []map[string]any `json:"data"`
			}
			e.get(t, "/cube/template", &whole)
			for _, it := range whole.Data {
				if _, ok := it["builder"]; ok {
					t.Errorf("the unpaged listing (upstream's answer) names a builder: %v", it)
				}
			}

			var one map[string]any
			e.get(t, "/cube/template?template_id=tpl-built", &one)
			if one["builder"] != builder {
				t.Errorf("template: builder %v, want %s", one["builder"], builder)
			}
			var two map[string]any
			e.get(t, "/cube/template?template_id=two", &two)
			if b, ok := two["builder"]; ok {
				t.Errorf("a template whose builder is not known answers builder %v", b)
			}

			var jobInfo struct {
				Job struct {
					Artifact map[string]any `json:"artifact"`
				} `json:"job"`
			}
			e.get(t, "/cube/template/from-image?job_id="+job.JobID, &jobInfo)
			if jobInfo.Job.Artifact["builder"] != builder {
				t.Errorf("job's artifact: builder %v, want %s", jobInfo.Job.Artifact["builder"], builder)
			}
			var art struct {
				Job struct {
					Artifact map[string]any `json:"artifact"`
				} `json:"job"`
			}
			e.get(t, "/cube/rootfs-artifact?artifact_id="+aid, &art)
			if art.Job.Artifact["builder"] != builder {
				t.Errorf("rootfs-artifact: builder %v, want %s", art.Job.Artifact["builder"], builder)
			}
		})
	}
}

// report posts r to the status callback as the data plane does.
func (e *realEnv) report(t *testing.T, jobID string, r ports.StatusReport) {
	t.Helper()
	body, err := json.Marshal(wire.EncodeStatusReport(r))
	if err != nil {
		t.Fatal(err)
	}
	if rec := do(e.h, "POST", "/internal/template/jobs/"+jobID+"/status", string(body), tokenHdr()); rec.Code != 200 {
		t.Fatalf("report %s/%s: %d %s", r.Update.Status, r.Update.Phase, rec.Code, rec.Body)
	}
}

// get reads a public route and decodes its answer into out; anything but
// ret_code 200 fails the test.
func (e *realEnv) get(t *testing.T, target string, out any) {
	t.Helper()
	rec := do(e.h, "GET", target, "", nil)
	if code := retCode(t, rec); code != 200 {
		t.Fatalf("GET %s: ret_code %d: %s", target, code, rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
}

// artifactOf is the artifact of a READY template.
func (e *realEnv) artifactOf(t *testing.T, templateID string) string {
	t.Helper()
	d, err := e.store.Templates().GetDefinition(context.Background(), templateID)
	if err != nil || d.RootfsArtifactID == "" {
		t.Fatalf("template %s: %+v %v", templateID, d, err)
	}
	return d.RootfsArtifactID
}
