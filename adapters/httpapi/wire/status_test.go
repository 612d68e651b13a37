package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

func intp(v int) *int       { return &v }
func strp(v string) *string { return &v }

const sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestStatusReportRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		in   ports.StatusReport
		// want is in minus what the wire does not carry.
		want ports.StatusReport
	}{
		{
			name: "progress",
			in: ports.StatusReport{Update: core.JobUpdate{Status: core.JobRunning, Phase: core.PhasePulling, Progress: intp(5),
				Pull: &core.PullProgress{TotalBytes: 100, DownloadedBytes: 0, TotalLayers: 3, CompletedLayers: 0, SpeedBPS: 7}}},
			want: ports.StatusReport{Update: core.JobUpdate{Status: core.JobRunning, Phase: core.PhasePulling, Progress: intp(5),
				Pull: &core.PullProgress{TotalBytes: 100, TotalLayers: 3, SpeedBPS: 7}}},
		},
		{
			name: "zero progress and cleared error are sent",
			in:   ports.StatusReport{Update: core.JobUpdate{Status: core.JobRunning, Progress: intp(0), ErrorMessage: strp("")}},
			want: ports.StatusReport{Update: core.JobUpdate{Status: core.JobRunning, Progress: intp(0), ErrorMessage: strp("")}},
		},
		{
			name: "failed",
			in:   ports.StatusReport{Update: core.Fail(core.PhaseBuildingExt4, "mkfs.ext4: no space")},
			want: ports.StatusReport{Update: core.Fail(core.PhaseBuildingExt4, "mkfs.ext4: no space")},
		},
		{
			name: "master-only fields are dropped",
			in: ports.StatusReport{Update: core.JobUpdate{Status: core.JobRunning, TemplateStatus: "READY", ResultJSON: "{}",
				ExpectedNodeCount: intp(3)}},
			want: ports.StatusReport{Update: core.JobUpdate{Status: core.JobRunning}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := roundTrip(t, tc.in)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func roundTrip(t *testing.T, in ports.StatusReport) ports.StatusReport {
	t.Helper()
	b, err := json.Marshal(EncodeStatusReport(in))
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeStatusReport(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return got
}

func TestBuiltReportCarriesArtifact(t *testing.T) {
	p := 100
	in := ports.StatusReport{
		Update: core.JobUpdate{Status: core.JobBuilt, Phase: core.PhaseReady, Progress: &p, ArtifactID: "rfs-0123456789abcdef01234567",
			ArtifactStatus: "READY", Fingerprint: "fp", SourceImageDigest: "sha256:" + sha},
		Artifact: &core.Artifact{ArtifactID: "rfs-0123456789abcdef01234567", Fingerprint: "fp", SourceImageRef: "nginx:1",
			SourceImageDigest: "sha256:" + sha, DownloadBaseURL: "http://10.0.0.1:8090", Ext4Path: "/data/rfs/rfs.ext4",
			Ext4SHA256: sha, Ext4SizeBytes: 4 << 20, ImageConfigJSON: `{"Env":["A=1"]}`, WritableLayerSize: "20Gi",
			Status: core.ArtifactReady, StorageBackend: "s3", ObjectKey: "rfs/rfs.ext4",
			CubeEgressCABaked: true, CubeEgressCAFingerprint: sha, CubeEgressCATargetsWritten: 2,
			DownloadToken: "must-not-travel", GeneratedRequestJSON: "{}"},
	}
	got := roundTrip(t, in)
	want := *in.Artifact
	want.DownloadToken, want.GeneratedRequestJSON = "", ""
	if !reflect.DeepEqual(*got.Artifact, want) {
		t.Fatalf("artifact:\n got %+v\nwant %+v", *got.Artifact, want)
	}
	if strings.Contains(got.Update.ResultJSON, "must-not-travel") || !strings.Contains(got.Update.ResultJSON, `"ext4_sha256":"`+sha) {
		t.Fatalf("result_json = %s", got.Update.ResultJSON)
	}
}

func TestDecodeStatusReport(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		check   func(t *testing.T, r ports.StatusReport)
		errWant string // substring; "" means success
	}{
		{name: "floats become int64", body: `{"status":"RUNNING","progress":42.0,"pull_total_bytes":1.5e9,"pull_speed_bps":12.9}`,
			check: func(t *testing.T, r ports.StatusReport) {
				if *r.Update.Progress != 42 || r.Update.Pull.TotalBytes != 1500000000 || r.Update.Pull.SpeedBPS != 12 {
					t.Fatalf("got %+v %+v", r.Update, r.Update.Pull)
				}
			}},
		{name: "unknown and non-whitelisted fields dropped", body: `{"status":"RUNNING","template_status":"READY","result_json":"x","ready_node_count":9,"download_token":"t","evil":{"a":1}}`,
			check: func(t *testing.T, r ports.StatusReport) {
				if r.Update.TemplateStatus != "" || r.Update.ResultJSON != "" || r.Update.ReadyNodeCount != nil {
					t.Fatalf("non-whitelisted field got through: %+v", r.Update)
				}
			}},
		{name: "an upstream template center's CA fields", body: `{"status":"BUILT","phase":"READY","artifact_id":"rfs-1","cube_egress_ca_baked":true,` +
			`"cube_egress_ca_fingerprint":"` + sha + `","cube_egress_ca_targets_written":3}`,
			check: func(t *testing.T, r ports.StatusReport) {
				if a := r.Artifact; !a.CubeEgressCABaked || a.CubeEgressCAFingerprint != sha || a.CubeEgressCATargetsWritten != 3 {
					t.Fatalf("artifact %+v", a)
				}
			}},
		{name: "a CA flag that is not a bool", body: `{"status":"BUILT","cube_egress_ca_baked":"yes"}`, errWant: "cube_egress_ca_baked: expected true or false"},
		{name: "nulls are absent", body: `{"status":"RUNNING","progress":null,"error_message":null}`,
			check: func(t *testing.T, r ports.StatusReport) {
				if r.Update.Progress != nil || r.Update.ErrorMessage != nil {
					t.Fatalf("got %+v", r.Update)
				}
			}},
		{name: "progress above 100 capped", body: `{"progress":250}`,
			check: func(t *testing.T, r ports.StatusReport) {
				if *r.Update.Progress != 100 {
					t.Fatalf("progress %d", *r.Update.Progress)
				}
			}},
		{name: "non-BUILT has no artifact", body: `{"status":"FAILED","artifact_id":"rfs-1","ext4_sha256":"` + sha + `"}`,
			check: func(t *testing.T, r ports.StatusReport) {
				if r.Artifact != nil || r.Update.ResultJSON != "" {
					t.Fatalf("artifact on a FAILED report: %+v", r.Artifact)
				}
			}},
		{name: "sha256 lowercased", body: `{"status":"BUILT","ext4_sha256":"` + strings.ToUpper(sha) + `"}`,
			check: func(t *testing.T, r ports.StatusReport) {
				if r.Artifact.Ext4SHA256 != sha {
					t.Fatalf("sha %s", r.Artifact.Ext4SHA256)
				}
			}},
		{name: "unknown status", body: `{"status":"DONE"}`, errWant: "status"},
		{name: "unknown phase", body: `{"phase":"COOKING"}`, errWant: "phase"},
		{name: "bad artifact status", body: `{"artifact_status":"SHINY"}`, errWant: "artifact_status"},
		{name: "status not a string", body: `{"status":3}`, errWant: "status: expected string"},
		{name: "progress as string", body: `{"progress":"50"}`, errWant: "progress: expected number"},
		{name: "negative bytes", body: `{"pull_total_bytes":-1}`, errWant: "pull_total_bytes: must not be negative"},
		{name: "huge number", body: `{"ext4_size_bytes":1e300}`, errWant: "ext4_size_bytes: number out of range"},
		{name: "bad sha", body: `{"ext4_sha256":"abc"}`, errWant: "ext4_sha256"},
		{name: "bad artifact id", body: `{"artifact_id":"../../etc"}`, errWant: "artifact_id"},
		{name: "empty body", body: ``, errWant: "body"},
		{name: "array body", body: `[]`, errWant: "body"},
		{name: "null body", body: `null`, errWant: "body"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := DecodeStatusReport(strings.NewReader(tc.body))
			if tc.errWant != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errWant) || !errors.Is(err, core.ErrInvalidArgument) {
					t.Fatalf("error = %v, want invalid argument naming %q", err, tc.errWant)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, r)
		})
	}
}

func TestStatusFor(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{nil, 200},
		{&core.FieldError{Field: "job_id", Reason: "is required"}, 400},
		{fmt.Errorf("job: %w", core.ErrNotFound), 404},
		{fmt.Errorf("job: %w", core.ErrConflict), 409},
		{fmt.Errorf("cap: %w", core.ErrBusy), 429},
		{core.ErrStoreNotInitialized, 503},
		{errors.New("boom"), 500},
	}
	for _, tc := range tests {
		if got := StatusFor(tc.err); got != tc.want {
			t.Errorf("StatusFor(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestValidateID(t *testing.T) {
	for _, ok := range []string{"rfs-0123456789abcdef01234567", "0b0c6f3e-7b1e-4e38-9a5c-1f2d3c4b5a69", "a", "a.b_c-d"} {
		if err := ValidateID("id", ok); err != nil {
			t.Errorf("ValidateID(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "..", "../x", "a/b", "-a", ".a", "a b", "a\x00", strings.Repeat("a", 129), "ä"} {
		if err := ValidateID("id", bad); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("ValidateID(%q) = %v, want invalid argument", bad, err)
		}
	}
}
