package control_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/tcapi"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/tcclient"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/portsmock"
)

// realDownloadRoute is the data plane's own download route (tcapi) over
// e's store, with an artifact store holding the objects named in objects;
// e's DataPlane asks it through the master's client (tcclient) with the
// shared token, as the wired cubemaster does.
type realDownloadRoute struct {
	mu      sync.Mutex
	objects map[string]bool // object keys the store holds
	asked   []string        // download tokens of the HEAD requests it answered
}

const sharedToken = "shared-callback-token"

func (e *env) withRealDownloadRoute(t *testing.T) *realDownloadRoute {
	t.Helper()
	rt := &realDownloadRoute{objects: map[string]bool{}}
	store := &portsmock.ArtifactStoreMock{
		StatFunc: func(_ context.Context, key string) (ports.ObjectInfo, error) {
			rt.mu.Lock()
			defer rt.mu.Unlock()
			if !rt.objects[key] {
				return ports.ObjectInfo{}, fmt.Errorf("object %s: %w", key, core.ErrNotFound)
			}
			return ports.ObjectInfo{Size: 64 << 20, SHA256: shaExt4}, nil
		},
		BackendFunc: func() string { return "mem" },
	}
	route := tcapi.New(tcapi.Config{
		Token: sharedToken, Artifacts: e.store.Artifacts(), Store: store, DownloadTokens: testDownloadTokens,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead && r.URL.Path == core.DownloadPath {
			rt.mu.Lock()
			rt.asked = append(rt.asked, r.Header.Get(core.DownloadTokenHeader))
			rt.mu.Unlock()
		}
		route.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	dp, err := tcclient.New(tcclient.Config{BaseURL: srv.URL, Token: sharedToken})
	if err != nil {
		t.Fatal(err)
	}
	e.disp.ArtifactExistsFunc = dp.ArtifactExists
	return rt
}

func (rt *realDownloadRoute) askedWith() []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return append([]string(nil), rt.asked...)
}

// dropToken makes aid's row a legacy one: READY, without a download token
// (adopted from upstream, or written before tokens).
func (e *env) dropToken(aid string) {
	e.t.Helper()
	if _, err := e.store.Artifacts().Update(e.ctx, aid, func(a *core.Artifact) error {
		a.DownloadToken = ""
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
}

// TestLegacyRowWithoutTokenIsAskedForReal: redo's reuse check and migrate
// ask the data plane whether a READY artifact's bytes are still there. For
// a legacy row without a download token the client answered "present"
// without asking, so a redo reused bytes that were gone (and sent the
// nodes to download nothing) and migrate removed the only copy, the local
// one. Now the row gets its token (the one it keeps for its nodes) and the
// data plane's real download route is asked with it.
func TestLegacyRowWithoutTokenIsAskedForReal(t *testing.T) {
	for _, tc := range []struct {
		name   string
		op     string // "redo" or "migrate"
		stored bool   // the data plane's store holds the artifact's object
	}{
		{"redo, bytes gone: rebuild", "redo", false},
		{"redo, bytes there: reuse", "redo", true},
		{"migrate, bytes gone: upload the local copy", "migrate", false},
		{"migrate, bytes there: already migrated", "migrate", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "node-1")
			var f *migrateFakes
			var aid string
			tid := "tpl-legacy"
			if tc.op == "migrate" {
				f = newMigrateFakes()
				e.withMigrate(f)
				aid = e.legacyTemplate(tid, fpA, f, true)
				// The row names an object, as after an earlier migrate
				// or an upstream S3 upload.
				if _, err := e.store.Artifacts().Update(e.ctx, aid, func(a *core.Artifact) error {
					a.ObjectKey, a.StorageBackend = aid+"/"+aid+".ext4", "s3"
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			} else {
				e.ready(tid, fpA)
				aid = aidOf(fpA)
			}
			e.dropToken(aid)
			rt := e.withRealDownloadRoute(t)
			if tc.stored {
				rt.mu.Lock()
				rt.objects[core.ObjectKeyOf(e.artifact(aid))] = true
				rt.mu.Unlock()
			}

			var job *core.Job
			if tc.op == "redo" {
				var err error
				job, err = e.svc.Redo(e.ctx, control.RedoRequest{RequestID: "r-legacy", TemplateID: tid, DownloadBaseURL: "master:8089", RegistryPassword: "pw"})
				if err != nil {
					t.Fatalf("Redo: %v", err)
				}
				e.wait()
			} else {
				job = e.migrate(tid)
			}

			switch tc.op {
			case "redo":
				builds := len(e.disp.SubmitBuildCalls()) - 1 // the create's
				if !tc.stored {
					eq(t, "resume phase", job.ResumePhase, core.PhaseBuildingExt4)
					eq(t, "rebuilds submitted", builds, 1)
					break
				}
				eq(t, "resume phase", job.ResumePhase, core.PhaseSnapshotting)
				eq(t, "rebuilds submitted", builds, 0)
				eq(t, "redo status", e.job(job.JobID).Status, core.JobReady)
			case "migrate":
				eq(t, "migrate status", job.Status, core.JobReady)
				if !tc.stored {
					eq(t, "uploads", f.uploads, 1)
					if !bytes.Equal(f.store[aid+"/"+aid+".ext4"], legacyBytes) {
						t.Errorf("the store does not hold the legacy bytes; local copies removed: %v", f.removed)
					}
					if !strings.Contains(job.ResultJSON, `"migrated"`) {
						t.Errorf("result_json = %s, want migrated", job.ResultJSON)
					}
					break
				}
				eq(t, "uploads", f.uploads, 0)
				if !strings.Contains(job.ResultJSON, "already_migrated") {
					t.Errorf("result_json = %s, want already_migrated", job.ResultJSON)
				}
			}

			// Asked once, with the token the row now keeps: the one its
			// nodes are given (a reusing redo hands it out; its resume
			// kept it).
			row := e.artifact(aid)
			if asked := rt.askedWith(); len(asked) != 1 || asked[0] == "" || asked[0] != testDownloadTokens.For(row.ArtifactID, row.DownloadToken) {
				t.Errorf("the data plane was asked %d times with tokens %q (row token %q); want once, with the token derived from the row's", len(asked), asked, row.DownloadToken)
			}
		})
	}
}
