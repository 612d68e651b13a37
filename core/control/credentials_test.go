package control_test

import (
	"context"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/sealer"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
)

// TestRedoRebuildsAPrivateImageWithItsOwnCredentials: a template created
// with registry credentials whose bytes are gone is rebuilt by a redo that
// names no credentials. The rebuild must go to the data plane with the
// template's own username (it is part of the stored request the data plane
// checks) and password; before, the redo call's empty credentials replaced
// them and the data plane refused the build as a different request.
func TestRedoRebuildsAPrivateImageWithItsOwnCredentials(t *testing.T) {
	e := newEnv(t, "node-1")
	s, err := sealer.FromSecret("callback-token-for-tests-0123")
	if err != nil {
		t.Fatal(err)
	}
	e.svc.Sealer = s
	req := request("tpl-private")
	req.RegistryUsername, req.RegistryPassword = "bob", "s3cret"
	job := e.create(req)
	stored := e.job(job.JobID)
	if stored.RegistryAuth == "" || strings.Contains(stored.RegistryAuth, "s3cret") {
		t.Fatalf("registry auth stored as %q, want it sealed", stored.RegistryAuth)
	}
	e.build(job.JobID, fpA)
	e.wait()

	e.disp.ArtifactExistsFunc = func(context.Context, *core.Artifact) (bool, error) { return false, nil }
	redo, err := e.svc.Redo(e.ctx, control.RedoRequest{RequestID: "r2", TemplateID: "tpl-private"})
	if err != nil {
		t.Fatal(err)
	}
	calls := e.disp.SubmitBuildCalls()
	br := calls[len(calls)-1].Req
	eq(t, "rebuild job", br.JobID, redo.JobID)
	eq(t, "username", br.Request.RegistryUsername, "bob")
	eq(t, "password", br.Request.RegistryPassword, "s3cret")
	// What the data plane checks: the request it is sent is the job's.
	norm := *br.Request
	n, err := core.NormalizeFromImageRequest(&norm, nil)
	if err != nil {
		t.Fatal(err)
	}
	canon, err := core.CanonicalRequestJSON(n)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "request matches the job's", canon, e.job(redo.JobID).RequestJSON)
	if e.job(redo.JobID).RegistryAuth == "" {
		t.Error("the redo job does not carry the credentials forward")
	}

	// Credentials given to the redo call win.
	e.build(redo.JobID, fpA)
	e.wait()
	again, err := e.svc.Redo(e.ctx, control.RedoRequest{TemplateID: "tpl-private", RegistryUsername: "bob", RegistryPassword: "rotated"})
	if err != nil {
		t.Fatal(err)
	}
	calls = e.disp.SubmitBuildCalls()
	eq(t, "rotated password", calls[len(calls)-1].Req.Request.RegistryPassword, "rotated")
	eq(t, "rotated job", calls[len(calls)-1].Req.JobID, again.JobID)
}
