package data_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/data"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/portsmock"
	"github.com/cubesandbox/templatecenter/testkit/testca"
)

// syncBuffer is a log sink builds may write to from their goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestBuildBakesTheCubeCA: the CA the master sends, else the data plane's
// own, is baked into the tree the builder gets (a distroless tree here:
// the bundle is seeded), its fingerprint is the artifact's, and the row
// and the BUILT report say so; without a CA the build says it went
// without; a broken CA fails the build.
func TestBuildBakesTheCubeCA(t *testing.T) {
	sent, own := testca.PEM(1), testca.PEM(2)
	fpOf := func(pem []byte) string {
		ca, err := core.ParseCubeCA(pem)
		if err != nil {
			t.Fatal(err)
		}
		return ca.Fingerprint
	}
	off := false
	tests := []struct {
		name      string
		sent      []byte
		own       func(context.Context) ([]byte, error) // nil: no source
		withCA    *bool
		wantFP    string // "" = not baked
		wantLog   string
		wantError string
	}{
		{name: "sent by the master", sent: sent, wantFP: fpOf(sent)},
		{name: "the master's wins over the data plane's", sent: sent, own: func(context.Context) ([]byte, error) { return own, nil }, wantFP: fpOf(sent)},
		{name: "the data plane's own", own: func(context.Context) ([]byte, error) { return own, nil }, wantFP: fpOf(own)},
		{name: "none installed", own: func(context.Context) ([]byte, error) { return nil, fmt.Errorf("no file: %w", core.ErrNotFound) },
			wantLog: "no CubeEgress root CA is installed"},
		{name: "none configured", wantLog: "no CubeEgress root CA is configured"},
		{name: "with_cube_ca=false", sent: sent, own: func(context.Context) ([]byte, error) { t.Error("source read"); return own, nil }, withCA: &off},
		{name: "a broken CA fails the build", own: func(context.Context) ([]byte, error) {
			return nil, fmt.Errorf("CubeEgress root CA x: %w", core.ErrInvalidArgument)
		}, wantError: "with_cube_ca=true"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld()
			req := fromImage("tpl-ca")
			req.WithCubeCA = tc.withCA
			w.addJob(t, "job-ca", req)
			logs := &syncBuffer{}
			r := newReplica(t, w, data.ExecutorConfig{Logger: slog.New(slog.NewTextHandler(logs, nil))})
			if tc.own != nil {
				r.exec.CubeCA = &portsmock.CubeCASourceMock{CubeCAFunc: tc.own}
			}
			var tree []string
			r.builder.BuildFunc = func(ctx context.Context, spec ports.BuildSpec, es ports.Tree) (ports.BuildResult, error) {
				for i := range es.Len() {
					e, err := es.Entry(i)
					if err != nil {
						return ports.BuildResult{}, err
					}
					tree = append(tree, e.Header.Name)
				}
				return writeImage(spec, es)
			}
			br := buildReq("job-ca", req)
			br.CubeCA = tc.sent
			if err := r.exec.Submit(context.Background(), br); err != nil {
				t.Fatal(err)
			}
			o := r.wait(t)
			if tc.wantError != "" {
				if o.Err == nil || !strings.Contains(o.Err.Error(), tc.wantError) {
					t.Fatalf("outcome error %v, want %q", o.Err, tc.wantError)
				}
				if j := w.job("job-ca"); j.Status != core.JobFailed || !strings.Contains(j.ErrorMessage, tc.wantError) {
					t.Fatalf("job %s: %s", j.Status, j.ErrorMessage)
				}
				return
			}
			if o.Err != nil {
				t.Fatal(o.Err)
			}
			a, _ := w.artifact(o.ArtifactID)
			reps := w.reportsOf("job-ca")
			built := reps[len(reps)-1].r.Artifact
			seeded := strings.Contains(strings.Join(tree, ","), "etc/ssl/certs/ca-certificates.crt")
			if tc.wantFP == "" {
				if a.CubeEgressCABaked || built.CubeEgressCABaked || seeded {
					t.Fatalf("not wanted, yet baked: row %+v, tree %v", a, tree)
				}
				if plain, _ := expectedArtifactID(t, req); o.ArtifactID != plain {
					t.Fatalf("artifact %s, want %s: no CA, no change", o.ArtifactID, plain)
				}
				if !strings.Contains(logs.String(), tc.wantLog) {
					t.Fatalf("logs lack %q:\n%s", tc.wantLog, logs)
				}
				return
			}
			if !a.CubeEgressCABaked || a.CubeEgressCAFingerprint != tc.wantFP || a.CubeEgressCATargetsWritten != 1 || !seeded {
				t.Fatalf("row %+v, tree %v", a, tree)
			}
			if !built.CubeEgressCABaked || built.CubeEgressCAFingerprint != tc.wantFP {
				t.Fatalf("BUILT report artifact %+v", built)
			}
			c := *req
			n, err := core.NormalizeFromImageRequest(&c, nil)
			if err != nil {
				t.Fatal(err)
			}
			fp, _ := core.Fingerprint(core.SpecInputFor(n, testDigest, tc.wantFP, "", "fake/1"))
			if want, _ := core.ArtifactIDFor(fp); o.ArtifactID != want {
				t.Fatalf("artifact %s, want %s (the CA's fingerprint in the spec)", o.ArtifactID, want)
			}
		})
	}
}
