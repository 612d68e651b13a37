package e2e

import (
	"crypto/rand"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cubesandbox/templatecenter/testkit/testimage"
)

// TestChunkedDistribution: a second template on the same base as the
// first reaches every node as the chunks the node lacked, through the
// real master, data planes (S3 store) and node agents, and the nodes hold
// the artifact's exact bytes.
func TestChunkedDistribution(t *testing.T) {
	c := startCluster(t)
	blob := func(n int) string {
		b := make([]byte, n)
		rand.Read(b)
		return string(b)
	}
	var baseEntries []testimage.Entry
	baseEntries = append(baseEntries, testimage.Dir("usr", 0o755), testimage.Dir("usr/lib", 0o755))
	for i := range 40 {
		baseEntries = append(baseEntries, testimage.File(fmt.Sprintf("usr/lib/lib%02d.so", i), 0o644, blob(100<<10)))
	}
	base, err := testimage.Layer(baseEntries)
	if err != nil {
		t.Fatal(err)
	}
	push := func(name string) string {
		app, err := testimage.Layer([]testimage.Entry{testimage.Dir("app", 0o755), testimage.File("app/server", 0o755, blob(300<<10))})
		if err != nil {
			t.Fatal(err)
		}
		img, err := testimage.Image([]v1.Layer{base, app}, v1.Config{Cmd: []string{"/app/server"}})
		if err != nil {
			t.Fatal(err)
		}
		ref := fmt.Sprintf("%s/e2e/%s:%s", c.registry, name, randHex(4))
		if _, err := testimage.Push(ref, img); err != nil {
			t.Fatal(err)
		}
		return ref
	}
	ready := func(templateID, image string) (string, string) {
		e := c.createFromImage(templateID, image)
		if e.Ret.Code != 200 || e.Job == nil {
			t.Fatalf("create %s: %s", templateID, e.Raw)
		}
		done := c.waitJob(e.Job.JobID, 2*time.Minute)
		if done.Job.Status != "READY" || done.Job.ReadyNodeCount != 2 || done.Job.Artifact == nil {
			t.Fatalf("%s: %s", templateID, done.Raw)
		}
		return done.Job.ArtifactID, done.Job.Artifact.SHA256
	}
	ready("tpl-chunks-1", push("chunks-one"))
	aid, sha := ready("tpl-chunks-2", push("chunks-two"))
	for i, n := range c.nodes {
		if got := fileSHA(t, c.nodeArtifact(i, aid)); got != sha {
			t.Fatalf("node %d holds sha256 %s, the artifact is %s", i+1, got, sha)
		}
		log := n.log.String()
		if !strings.Contains(log, "artifact assembled from chunks") || !strings.Contains(log, aid) {
			t.Fatalf("node %d did not assemble %s from chunks:\n%s", i+1, aid, tail(log, 4000))
		}
	}
}
