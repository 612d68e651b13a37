package control_test

import (
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
)

// TestReusedArtifactKeepsItsToken: a second template reusing a READY
// artifact must not rotate its download token, or every node that later
// fetches the first template's artifact is refused (403). Neither
// template's stored request holds the token or its seed (a copy of the
// database downloads nothing); resolving a sandbox request fills in the
// token nodes were given.
func TestReusedArtifactKeepsItsToken(t *testing.T) {
	e := newEnv(t, "node-1")
	e.ready("tpl-a", fpA)
	aid := aidOf(fpA)
	seed, first := e.artifact(aid).DownloadToken, e.nodeToken(aid)
	if !core.IsDownloadSeed(seed) || first == "" || first == seed {
		t.Fatalf("artifact column %q, node token %q", seed, first)
	}
	e.ready("tpl-b", fpA)
	if got := e.artifact(aid).DownloadToken; got != seed {
		t.Fatalf("reusing the artifact rotated its token %q -> %q: template a's nodes are refused", seed, got)
	}
	for _, c := range e.agent.CreateImageCalls() {
		eq(t, "token a node was given", c.Art.Token, first)
	}
	for _, tid := range []string{"tpl-a", "tpl-b"} {
		stored := e.def(tid).RequestJSON
		if strings.Contains(stored, seed) || strings.Contains(stored, first) || strings.Contains(stored, "token=") {
			t.Errorf("%s's stored request holds a download token: %s", tid, stored)
		}
		res, err := e.svc.ResolveSandboxRequest(e.ctx, &core.SandboxRequest{Annotations: map[string]string{core.AnnotationTemplateID: tid}})
		if err != nil {
			t.Fatal(err)
		}
		info, err := e.svc.GetTemplate(e.ctx, tid)
		if err != nil || !strings.Contains(info.CreateRequest, first) || strings.Contains(info.CreateRequest, seed) {
			t.Errorf("%s: template info's request does not carry the node token: %v %s", tid, err, info.CreateRequest)
		}
		img := res.Request.Containers[0].Image
		eq(t, tid+" resolved token", img.Annotations[core.AnnotationArtifactToken], first)
		eq(t, tid+" resolved URL", img.Annotations[core.AnnotationArtifactURL], core.DownloadURL(e.artifact(aid).DownloadBaseURL, aid, first))
	}
}
