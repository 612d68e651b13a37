package control_test

import (
	"slices"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
)

// TestSandboxFromARestrictedTemplateKeepsItsPolicy: a template created
// with allowInternetAccess false, an allowOut and a denyOut list; a
// sandbox request that names it and says nothing about the network must
// get that policy (the node's request carries it) and the template-id
// label. Before, the merge dropped the policy: a sandbox from a restricted
// template got default egress.
func TestSandboxFromARestrictedTemplateKeepsItsPolicy(t *testing.T) {
	e := newEnv(t, "node-1")
	req := request("tpl-net")
	no := false
	req.CubeVSContext = &core.CubeVSContext{AllowInternetAccess: &no, AllowOut: []string{"10.0.0.0/8"}, DenyOut: []string{"192.168.0.0/16"}}
	job := e.create(req)
	e.build(job.JobID, fpA)
	e.wait()

	res, err := e.svc.ResolveSandboxRequest(e.ctx, &core.SandboxRequest{Annotations: map[string]string{core.AnnotationTemplateID: "tpl-net"}})
	if err != nil {
		t.Fatal(err)
	}
	p := res.Request.NetworkPolicy()
	if p == nil || p.AllowInternetAccess == nil || *p.AllowInternetAccess ||
		!slices.Equal(p.AllowOut, []string{"10.0.0.0/8"}) || !slices.Equal(p.DenyOut, []string{"192.168.0.0/16"}) {
		t.Fatalf("merged policy = %+v, want the template's", p)
	}
	eq(t, "label", res.Request.Labels[core.AnnotationTemplateID], "tpl-net")
}
