package tcapi

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
)

func TestBuild(t *testing.T) {
	envd := []byte("envd binary")
	envdB64 := base64.StdEncoding.EncodeToString(envd)
	okBody := `{"job_id":"0b0c6f3e-7b1e-4e38-9a5c-1f2d3c4b5a69","request":{"source_image_ref":"nginx:1","writable_layer_size":"20Gi","template_id":"tpl-1"},` +
		`"download_base_url":"http://10.0.0.1:8089","envd_sha256":"` + strings.ToUpper(sum(envd)) + `","envd_data":"` + envdB64 + `","unknown":1}`
	tests := []struct {
		name      string
		body      string
		submitErr error
		nilBuilds bool
		limit     int64
		want      int
		wantIn    string
		submitted bool
	}{
		{name: "accepted", body: okBody, want: 200, wantIn: `"status":"accepted"`, submitted: true},
		{name: "empty body", body: ``, want: 400, wantIn: "body: is empty"},
		{name: "bad json", body: `{"job_id":`, want: 400, wantIn: "body"},
		{name: "missing job_id", body: `{"request":{}}`, want: 400, wantIn: "job_id"},
		{name: "hostile job_id", body: `{"job_id":"../x","request":{}}`, want: 400, wantIn: "job_id"},
		{name: "missing request", body: `{"job_id":"j1"}`, want: 400, wantIn: "request"},
		{name: "type error names nested field", body: `{"job_id":"j1","request":{"writable_layer_size":20}}`, want: 400, wantIn: "request.writable_layer_size: expected string"},
		{name: "envd sha malformed", body: `{"job_id":"j1","request":{},"envd_sha256":"xyz"}`, want: 400, wantIn: "envd_sha256"},
		{name: "envd sha mismatch", body: `{"job_id":"j1","request":{},"envd_sha256":"` + strings.Repeat("0", 64) + `","envd_data":"` + envdB64 + `"}`, want: 400, wantIn: "envd_data"},
		{name: "too large", body: okBody, limit: 64, want: 413, wantIn: "larger than 64"},
		{name: "ca not a certificate", body: `{"job_id":"j1","request":{},"cube_egress_ca_pem":"hello"}`, want: 400, wantIn: "cube_egress_ca"},
		{name: "request mismatch", body: okBody, submitErr: &core.FieldError{Field: "request", Reason: "differs from the job's request_json"}, want: 400, wantIn: "request_json", submitted: true},
		{name: "job missing or not pending", body: okBody, submitErr: fmt.Errorf("job j1 is READY: %w", core.ErrNotFound), want: 404, wantIn: "READY", submitted: true},
		{name: "in flight", body: okBody, submitErr: fmt.Errorf("job j1: %w", core.ErrConflict), want: 409, submitted: true},
		{name: "at cap", body: okBody, submitErr: fmt.Errorf("2 builds running: %w", core.ErrBusy), want: 429, submitted: true},
		{name: "internal error hidden", body: okBody, submitErr: errors.New("mysql 10.1.2.3: denied"), want: 500, wantIn: `"internal error"`, submitted: true},
		{name: "no executor", body: okBody, nilBuilds: true, want: 503, wantIn: "executor"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := &fakeBuilds{err: tc.submitErr}
			cfg := Config{Token: testToken, Builds: b, MaxBuildBodyBytes: tc.limit}
			if tc.nilBuilds {
				cfg.Builds = nil
			}
			rec := postJSON(t, New(cfg), "/tc/api/v1/build", tc.body)
			if rec.Code != tc.want || !strings.Contains(rec.Body.String(), tc.wantIn) {
				t.Fatalf("got %d %s, want %d containing %q", rec.Code, rec.Body.String(), tc.want, tc.wantIn)
			}
			if strings.Contains(rec.Body.String(), "10.1.2.3") {
				t.Fatalf("internal detail leaked: %s", rec.Body.String())
			}
			if rec.Code != 200 {
				if _, ok := jsonBody(t, rec)["error"]; !ok {
					t.Fatalf("error body lacks \"error\": %s", rec.Body.String())
				}
			}
			if (len(b.got) == 1) != tc.submitted {
				t.Fatalf("submitted %d requests, want submitted=%v", len(b.got), tc.submitted)
			}
			if tc.want == 200 {
				got := b.got[0]
				if got.JobID != "0b0c6f3e-7b1e-4e38-9a5c-1f2d3c4b5a69" || got.Request.SourceImageRef != "nginx:1" ||
					string(got.EnvdData) != string(envd) || got.EnvdSHA256 != sum(envd) || got.DownloadBaseURL != "http://10.0.0.1:8089" {
					t.Fatalf("submitted %+v", got)
				}
				if m := jsonBody(t, rec); m["job_id"] != got.JobID {
					t.Fatalf("answer %v", m)
				}
			}
		})
	}
}

func TestDeleteArtifact(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		err      error
		nilDel   bool
		want     int
		wantCall bool
	}{
		{name: "deleted", body: `{"artifact_id":"rfs-1"}`, want: 200, wantCall: true},
		{name: "already gone is success", body: `{"artifact_id":"rfs-1"}`, err: fmt.Errorf("artifact rfs-1: %w", core.ErrNotFound), want: 200, wantCall: true},
		{name: "missing id", body: `{}`, want: 400},
		{name: "traversal id", body: `{"artifact_id":"../../etc/passwd"}`, want: 400},
		{name: "id wrong type", body: `{"artifact_id":5}`, want: 400},
		{name: "still referenced", body: `{"artifact_id":"rfs-1"}`, err: fmt.Errorf("rfs-1 has 2 references: %w", core.ErrConflict), want: 409, wantCall: true},
		{name: "backend failure", body: `{"artifact_id":"rfs-1"}`, err: errors.New("s3: 500"), want: 500, wantCall: true},
		{name: "no deleter", body: `{"artifact_id":"rfs-1"}`, nilDel: true, want: 503},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := &fakeDeleter{err: tc.err}
			cfg := Config{Token: testToken, Deleter: d}
			if tc.nilDel {
				cfg.Deleter = nil
			}
			rec := postJSON(t, New(cfg), "/tc/api/v1/artifact/delete", tc.body)
			if rec.Code != tc.want {
				t.Fatalf("got %d %s, want %d", rec.Code, rec.Body.String(), tc.want)
			}
			if (len(d.got) == 1) != tc.wantCall {
				t.Fatalf("deleter calls %v", d.got)
			}
			if tc.want == 200 {
				m := jsonBody(t, rec)
				if m["status"] != "deleted" || m["artifact_id"] != "rfs-1" {
					t.Fatalf("answer %v", m)
				}
			}
		})
	}
}
