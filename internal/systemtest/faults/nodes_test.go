package faults

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/internal/systemtest/faults/harness"
)

func (w *world) nodeScenarios(t *testing.T) {
	c := w.c
	w.scenario(t, "NodeDownDuringDistribution", "a node killed while it is being given an artifact: the job is READY with the template PARTIALLY_READY; once the node is back the master's convergence brings the template there without a redo (I2, I6)", func(t *testing.T) map[string]any {
		ref, _ := c.PushImage("node-down", 64<<10)
		c.NodeProxies[1].Pause()
		job := w.create(t, "tpl-node-down", ref)
		w.waitPhase(t, job, time.Minute, "RUNNING/DISTRIBUTING")
		c.Nodes[1].Kill9()
		c.NodeProxies[1].Sever()
		c.NodeProxies[1].Resume()
		j := w.wait(t, job, 2*time.Minute)
		if j.Status != "READY" || j.TemplateStatus != "PARTIALLY_READY" || j.ReadyNodeCount != 1 {
			t.Fatalf("with node 2 killed: %s, template %s, %d ready; want READY, PARTIALLY_READY, 1", j.Status, j.TemplateStatus, j.ReadyNodeCount)
		}
		c.StartNode(1)
		back := time.Now()
		if st := w.api.WaitTemplate("tpl-node-down", "READY", 2*time.Minute); st != "READY" {
			t.Fatalf("template %s after node 2 came back, want READY", st)
		}
		took := time.Since(back)
		if _, err := os.Stat(c.NodeArtifact(1, j.ArtifactID)); err != nil {
			t.Errorf("node 2: %v", err)
		}
		return map[string]any{"node_back_to_ready_s": took.Seconds()}
	})
	w.scenario(t, "DeleteDuringDownload", "a template deleted while a node downloads its artifact: the delete completes, later downloads are refused, and nothing is left (I4)", func(t *testing.T) map[string]any {
		ref, _ := c.PushImage("del-dl", 4<<20)
		job := w.create(t, "tpl-del-dl", ref)
		j := w.mustReady(t, job)
		var seed string
		c.DB.QueryRow("SELECT COALESCE(download_token,'') FROM t_cube_rootfs_artifact WHERE artifact_id = ?", j.ArtifactID).Scan(&seed)
		// The row holds a seed; nodes download with the token derived
		// from it and the callback token.
		token := core.NewDownloadTokens(c.Token).For(j.ArtifactID, seed)
		url := c.MasterURLs[0] + "/cube/template/artifact/download?artifact_id=" + j.ArtifactID
		get := func(ctx context.Context) (*http.Response, error) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			req.Header.Set("X-Cube-Artifact-Token", token)
			return http.DefaultClient.Do(req)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp, err := get(ctx)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("download before the delete: %v %v", err, resp)
		}
		h := sha256.New()
		io.CopyN(h, resp.Body, 64<<10)
		if a := w.api.Delete("tpl-del-dl"); !a.OK() {
			t.Fatalf("delete during a download: %s", a)
		}
		n, rerr := io.Copy(h, resp.Body)
		resp.Body.Close()
		whole := rerr == nil && n+64<<10 == j.Artifact.Size && hex.EncodeToString(h.Sum(nil)) == j.Artifact.SHA256
		gone := harness.WaitFor(30*time.Second, func() bool {
			r, err := get(ctx)
			if err != nil {
				return false
			}
			r.Body.Close()
			return r.StatusCode != http.StatusOK
		})
		if !gone {
			t.Error("the artifact still downloads after its template was deleted")
		}
		return map[string]any{"inflight_download_completed_whole": whole, "inflight_error": errString(rerr)}
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
