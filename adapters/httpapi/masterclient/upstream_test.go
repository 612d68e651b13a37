package masterclient

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// TestBuiltReportForAnUpstreamMaster pins the fields an upstream master
// reads from a BUILT report (its RemoteBuildResult): ext4_path inside its
// artifact roots, the presigned artifact_url when the store can mint one,
// and the CubeEgress CA fields.
func TestBuiltReportForAnUpstreamMaster(t *testing.T) {
	var mu sync.Mutex
	var bodies []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]any
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &m)
		mu.Lock()
		bodies = append(bodies, m)
		mu.Unlock()
		io.WriteString(w, `{"status":"ok"}`)
	}))
	defer srv.Close()

	built := ports.StatusReport{
		Update:   core.JobUpdate{Status: core.JobBuilt, Phase: core.PhaseReady},
		Artifact: &core.Artifact{ArtifactID: "rfs-1", Ext4SHA256: "ab", Ext4SizeBytes: 10, Status: core.ArtifactReady, ObjectKey: "rfs-1/rfs-1.ext4"},
	}
	tests := []struct {
		name     string
		upstream *UpstreamPeer
		want     map[string]any // nil value: the key must be absent
	}{
		{"our master", nil, map[string]any{"ext4_path": nil, "artifact_url": nil, "cube_egress_ca_baked": false}},
		{"upstream master, file store", &UpstreamPeer{
			LocalPath: func(a *core.Artifact) string { return "/data/CubeMaster/storage/" + a.ObjectKey },
			SignURL:   func(context.Context, *core.Artifact) (string, error) { return "", core.ErrUnsupported },
		}, map[string]any{"ext4_path": "/data/CubeMaster/storage/rfs-1/rfs-1.ext4", "artifact_url": nil,
			"cube_egress_ca_baked": false, "cube_egress_ca_fingerprint": "", "cube_egress_ca_targets_written": 0.0}},
		{"upstream master, S3 store", &UpstreamPeer{
			LocalPath: func(*core.Artifact) string { return "" },
			SignURL:   func(context.Context, *core.Artifact) (string, error) { return "https://s3/rfs-1?sig", nil },
		}, map[string]any{"ext4_path": nil, "artifact_url": "https://s3/rfs-1?sig"}},
		{"signing fails", &UpstreamPeer{
			SignURL: func(context.Context, *core.Artifact) (string, error) { return "", errors.New("no credentials") },
		}, map[string]any{"artifact_url": nil}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Config{BaseURL: srv.URL, Token: token, Upstream: tc.upstream, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Report(context.Background(), "job-1", built); err != nil {
				t.Fatal(err)
			}
			if err := c.Report(context.Background(), "job-1", progress()); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			got, prog := bodies[len(bodies)-2], bodies[len(bodies)-1]
			mu.Unlock()
			for k, v := range tc.want {
				gv, ok := got[k]
				if v == nil && ok || v != nil && gv != v {
					t.Errorf("%s = %v (present %v), want %v", k, gv, ok, v)
				}
			}
			for _, k := range []string{"ext4_path", "artifact_url", "cube_egress_ca_baked"} {
				if _, ok := prog[k]; ok {
					t.Errorf("a progress report carries %s", k)
				}
			}
		})
	}
}
