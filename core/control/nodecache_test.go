package control_test

import (
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
)

// With NodeDownloadBaseURL set, every node is sent a download URL on that
// base (its node-local cache), still naming the artifact and its token;
// without it, the artifact's own base.
func TestNodeDownloadBaseURL(t *testing.T) {
	for _, tc := range []struct {
		name, base, want string
	}{
		{"artifact's base", "", "http://master:8089" + core.DownloadPath + "?"},
		{"node-local cache", "http://127.0.0.1:8091", "http://127.0.0.1:8091" + core.DownloadPath + "?"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "node-1", "node-2")
			e.svc.Config.NodeDownloadBaseURL = tc.base
			e.ready("tpl-cache", fpA)
			calls := e.agent.CreateImageCalls()
			if len(calls) != 2 {
				t.Fatalf("%d CreateImage calls, want 2", len(calls))
			}
			for _, c := range calls {
				u := c.Art.DownloadURL
				if !strings.HasPrefix(u, tc.want) || !strings.Contains(u, "artifact_id="+c.Art.ArtifactID) || !strings.Contains(u, "token=") {
					t.Errorf("node %s was sent %q, want it under %q", c.Node.ID, u, tc.want)
				}
			}
		})
	}
}
