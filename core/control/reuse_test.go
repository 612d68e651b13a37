package control_test

import (
	"encoding/json"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
)

// storedToken is the download token in a template's stored request: what a
// node told about that template downloads the artifact with.
func (e *env) storedToken(tid string) string {
	e.t.Helper()
	var req core.SandboxRequest
	if err := json.Unmarshal([]byte(e.def(tid).RequestJSON), &req); err != nil {
		e.t.Fatal(err)
	}
	return req.Containers[0].Image.Annotations[core.AnnotationArtifactToken]
}

// TestReusedArtifactKeepsItsToken: a second template reusing a READY
// artifact must not rotate its download token, or every node that later
// fetches the first template's artifact is refused (403).
func TestReusedArtifactKeepsItsToken(t *testing.T) {
	e := newEnv(t, "node-1")
	e.ready("tpl-a", fpA)
	aid := aidOf(fpA)
	first := e.artifact(aid).DownloadToken
	if first == "" || e.storedToken("tpl-a") != first {
		t.Fatalf("template a stores token %q, artifact has %q", e.storedToken("tpl-a"), first)
	}
	e.ready("tpl-b", fpA)
	if got := e.artifact(aid).DownloadToken; got != first {
		t.Fatalf("reusing the artifact rotated its token %q -> %q: template a's nodes are refused", first, got)
	}
	eq(t, "template b token", e.storedToken("tpl-b"), first)
	eq(t, "template a token", e.storedToken("tpl-a"), e.artifact(aid).DownloadToken)
}
