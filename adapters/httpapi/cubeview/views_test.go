package cubeview

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
)

func TestArtifactViewHidesTheToken(t *testing.T) {
	a := &core.Artifact{ArtifactID: "rfs-1", Ext4SHA256: "abc", DownloadToken: "tok-secret", DownloadBaseURL: "http://m:8089", Status: core.ArtifactReady}
	b, err := json.Marshal(NewJobInfo(&core.Job{JobID: "j", ArtifactID: "rfs-1"}, a))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "tok-secret") {
		t.Fatalf("the view leaks the download token: %s", b)
	}
	// master_node_ip is upstream's name for the download base URL; the
	// view carries it under its real name too.
	if v := NewArtifactInfo(a); v.MasterNodeIP != "http://m:8089" || v.DownloadBaseURL != "http://m:8089" || v.Ext4SHA256 != "abc" {
		t.Fatalf("artifact view %+v", v)
	}
	if NewJobInfo(nil, a) != nil || NewArtifactInfo(nil) != nil {
		t.Fatal("nil rows gave views")
	}
}

func TestTemplateItemTimes(t *testing.T) {
	at := time.Date(2026, 1, 2, 4, 4, 5, 0, time.FixedZone("x", 3600))
	if got := NewTemplateItem(&control.Template{TemplateID: "t", CreatedAt: at}).CreatedAt; got != "2026-01-02T03:04:05Z" {
		t.Fatalf("created_at %q, want UTC RFC 3339", got)
	}
	if got := NewTemplateItem(&control.Template{TemplateID: "t"}).CreatedAt; got != "" {
		t.Fatalf("zero time gave %q", got)
	}
}

func TestTemplateResponseRequest(t *testing.T) {
	tpl := &control.Template{TemplateID: "t", CreateRequest: `{"a":1}`}
	if r := NewTemplateResponse(tpl, false); r.CreateRequest != nil || r.Replicas == nil {
		t.Fatalf("without request: %+v", r)
	}
	if r := NewTemplateResponse(tpl, true); string(r.CreateRequest.(json.RawMessage)) != `{"a":1}` {
		t.Fatalf("with request: %+v", r)
	}
	if RawOrString("not json") != "not json" || RawOrString("") != nil {
		t.Fatal("RawOrString")
	}
}

func TestBuildStatus(t *testing.T) {
	tests := []struct {
		job        core.Job
		state, msg string
	}{
		{core.Job{Status: core.JobPending, Phase: core.PhasePulling}, "building", "PULLING"},
		{core.Job{Status: core.JobReady, Phase: core.PhaseReady, Progress: 100}, "ready", "READY"},
		{core.Job{Status: core.JobFailed, Phase: core.PhasePulling, ErrorMessage: "manifest unknown"}, "error", "manifest unknown"},
	}
	for _, tc := range tests {
		got := NewBuildStatus("b-1", &tc.job)
		if got.Status != tc.state || got.Message != tc.msg || got.BuildID != "b-1" {
			t.Errorf("%s/%s: %+v", tc.job.Status, tc.job.Phase, got)
		}
	}
}

func TestFromImageRequestKeepsEveryField(t *testing.T) {
	body := `{"requestID":"r","source_image_ref":"nginx:1","registry_username":"u","registry_password":"p","template_id":"t",
	"alias":"a","instance_type":"gpu","network_type":"tap","cubevs_context":{"allowOut":["10.0.0.0/8"]},"writable_layer_size":"1Gi",
	"exposed_ports":[80],"distribution_scope":["n1"],"container_overrides":{"command":["/bin/sh"]},"platform":"linux/arm64","wait":true,
	"backend":"s3","enable_ivshmem":true}`
	var v FromImageRequest
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(v.Request())
	var want core.FromImageRequest
	if err := json.Unmarshal([]byte(body), &want); err != nil {
		t.Fatal(err)
	}
	wantJSON, _ := json.Marshal(&want)
	if string(got) != string(wantJSON) {
		t.Fatalf("the view dropped a field:\n got %s\nwant %s", got, wantJSON)
	}
}

func TestShownProgressIsNeverFullOnFailure(t *testing.T) {
	cases := []struct {
		job  core.Job
		want int
	}{
		{core.Job{Status: core.JobFailed, Phase: core.PhaseBuildingExt4, Progress: 100}, 40},
		{core.Job{Status: core.JobFailed, Phase: core.PhasePulling, Progress: 3}, 3},
		{core.Job{Status: core.JobFailed, Progress: 100}, 99},
		{core.Job{Status: core.JobRunning, Phase: core.PhasePulling, Progress: 12}, 12},
		{core.Job{Status: core.JobReady, Progress: 100}, 100},
	}
	for _, tc := range cases {
		if got := ShownProgress(&tc.job); got != tc.want {
			t.Errorf("%s %s %d%%: shown %d, want %d", tc.job.Status, tc.job.Phase, tc.job.Progress, got, tc.want)
		}
	}
}

// A replica row is READY or FAILED (upstream's two values); one whose step
// is still under way, without an error, is shown by its step.
func TestShownReplicaStatus(t *testing.T) {
	for _, tc := range []struct {
		status core.ReplicaStatus
		phase  core.ReplicaPhase
		err    string
		want   string
	}{
		{core.ReplicaReady, core.ReplicaPhaseReady, "", "READY"},
		{core.ReplicaFailed, core.ReplicaPhaseDistributing, "", "DISTRIBUTING"},
		{core.ReplicaFailed, core.ReplicaPhaseDistributed, "", "DISTRIBUTED"},
		{core.ReplicaFailed, core.ReplicaPhaseSnapshotting, "", "SNAPSHOTTING"},
		{core.ReplicaFailed, core.ReplicaPhaseFailed, "disk full", "FAILED"},
		{core.ReplicaFailed, core.ReplicaPhaseDistributed, "snapshot refused", "FAILED"},
	} {
		r := &core.Replica{Status: tc.status, Phase: tc.phase, ErrorMessage: tc.err}
		if got := ShownReplicaStatus(r); got != tc.want {
			t.Errorf("%s/%s %q shown %s, want %s", tc.status, tc.phase, tc.err, got, tc.want)
		}
	}
}

// TestTemplateItemReplicaCounts: a read with replica rows counts them; a
// listing (no rows) shows the latest job's node counts.
func TestTemplateItemReplicaCounts(t *testing.T) {
	tests := []struct {
		name             string
		tpl              control.Template
		wantReady, wantN int
	}{
		{"rows", control.Template{ReadyNodes: 9, TargetNodes: 9, Replicas: []*core.Replica{
			{NodeID: "a", Status: core.ReplicaReady}, {NodeID: "b", Status: core.ReplicaFailed}, {NodeID: "c", Status: core.ReplicaReady}}}, 2, 3},
		{"job counts", control.Template{ReadyNodes: 1, TargetNodes: 2}, 1, 2},
		{"nothing", control.Template{}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			it := NewTemplateItem(&tt.tpl)
			if it.ReplicasReady != tt.wantReady || it.ReplicasTotal != tt.wantN {
				t.Fatalf("ready %d of %d, want %d of %d", it.ReplicasReady, it.ReplicasTotal, tt.wantReady, tt.wantN)
			}
		})
	}
}
