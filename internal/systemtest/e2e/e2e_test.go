package e2e

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cubesandbox/templatecenter/adapters/artifactstore"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
	"github.com/cubesandbox/templatecenter/testkit/testimage"
)

func pushImage(t *testing.T, reg, name string, extra int) string {
	t.Helper()
	entries := []testimage.Entry{
		testimage.Dir("etc", 0o755), testimage.File("etc/os-release", 0o644, "ID=cube-e2e\n"),
		testimage.Dir("bin", 0o755), testimage.File("bin/app", 0o755, "#!/bin/sh\necho app\n"),
	}
	if extra > 0 {
		buf := make([]byte, extra)
		rand.Read(buf)
		entries = append(entries, testimage.Dir("data", 0o755), testimage.File("data/blob", 0o644, string(buf)))
	}
	l, err := testimage.Layer(entries)
	if err != nil {
		t.Fatal(err)
	}
	img, err := testimage.Image([]v1.Layer{l}, v1.Config{Cmd: []string{"/bin/app"}})
	if err != nil {
		t.Fatal(err)
	}
	ref := fmt.Sprintf("%s/e2e/%s:%s", reg, name, randHex(4))
	if _, err := testimage.Push(ref, img); err != nil {
		t.Fatal(err)
	}
	return ref
}

func fileSHA(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	defer f.Close()
	h := sha256.New()
	io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil))
}

// TestSystem drives the whole system through the public API.
func TestSystem(t *testing.T) {
	c := startCluster(t)
	image := pushImage(t, c.registry, "web", 0)

	var artifactID, sha string
	t.Run("CreateFromImageReadyOnBothNodes", func(t *testing.T) {
		e := c.createFromImage("tpl-e2e-a", image)
		if e.Ret.Code != 200 || e.Job == nil {
			t.Fatalf("create: %s", e.Raw)
		}
		done := c.waitJob(e.Job.JobID, 2*time.Minute)
		j := done.Job
		if j.Status != "READY" || j.TemplateStatus != "READY" || j.ReadyNodeCount != 2 {
			t.Fatalf("job: %s", done.Raw)
		}
		artifactID = j.ArtifactID
		if j.Artifact == nil || j.Artifact.SHA256 == "" {
			t.Fatalf("job has no artifact metadata: %s", done.Raw)
		}
		sha = j.Artifact.SHA256
		for i := range c.nodes {
			if got := fileSHA(t, c.nodeArtifact(i, artifactID)); got != sha {
				t.Fatalf("node %d holds sha256 %s, artifact is %s", i+1, got, sha)
			}
		}
	})

	t.Run("Alias", func(t *testing.T) {
		e := c.call(http.MethodPut, "/cube/template/tpl-e2e-a/alias", map[string]any{"requestID": "r1", "alias": "e2e-web"})
		if e.Ret.Code != 200 {
			t.Fatalf("set alias: %s", e.Raw)
		}
		info := c.call(http.MethodGet, "/cube/template?template_id=tpl-e2e-a", nil)
		if info.Ret.Code != 200 || !strings.Contains(string(info.Raw), "e2e-web") {
			t.Fatalf("template info lacks the alias: %s", info.Raw)
		}
		bad := c.call(http.MethodPut, "/cube/template/tpl-e2e-a/alias", map[string]any{"requestID": "r2", "alias": "Bad_Alias"})
		if bad.Ret.Code != 130400 {
			t.Fatalf("invalid alias: %s", bad.Raw)
		}
	})

	t.Run("TwentyConcurrentIdenticalCreates", func(t *testing.T) {
		var wg sync.WaitGroup
		ids := make([]string, 20)
		codes := make([]int, 20)
		for i := range ids {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				e := c.createFromImage("tpl-e2e-c", image)
				codes[i] = e.Ret.Code
				if e.Job != nil {
					ids[i] = e.Job.JobID
				}
			}(i)
		}
		wg.Wait()
		for i := range ids {
			if codes[i] != 200 || ids[i] == "" || ids[i] != ids[0] {
				t.Fatalf("create #%d: code %d job %q, want one job for all: %v", i, codes[i], ids[i], ids)
			}
		}
		var n int
		if err := c.db.QueryRow("SELECT COUNT(*) FROM t_cube_template_image_job WHERE template_id = 'tpl-e2e-c'").Scan(&n); err != nil || n != 1 {
			t.Fatalf("%d job rows (%v), want 1", n, err)
		}
		done := c.waitJob(ids[0], 2*time.Minute)
		if done.Job.Status != "READY" || done.Job.ArtifactID != artifactID {
			t.Fatalf("shared-spec template: %s (want READY reusing %s)", done.Raw, artifactID)
		}
		var arts int
		c.db.QueryRow("SELECT COUNT(*) FROM t_cube_rootfs_artifact").Scan(&arts)
		if arts != 1 {
			t.Fatalf("%d artifact rows, want 1: the same spec must be built once", arts)
		}
	})

	t.Run("TwoReplicasBuildOneSpecOnce", func(t *testing.T) {
		// Two templates with one spec, submitted together: the proxy hands
		// the builds to different replicas, the fingerprint lock lets one
		// build and the other reuse its READY artifact.
		img := pushImage(t, c.registry, "shared", 8<<20)
		// Builds are counted on the replicas' metrics (one BUILDING_EXT4
		// observation per fresh build, none for a reuse), as a difference
		// across this subtest, and per job in the replicas' logs.
		buildsBefore := c.freshBuilds(t)
		var wg sync.WaitGroup
		jobs := make([]string, 2)
		for i := range jobs {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				e := c.createFromImage(fmt.Sprintf("tpl-e2e-r%d", i), img)
				if e.Job != nil {
					jobs[i] = e.Job.JobID
				}
			}(i)
		}
		wg.Wait()
		var aids []string
		for _, id := range jobs {
			if id == "" {
				t.Fatalf("a create failed: %v", jobs)
			}
			done := c.waitJob(id, 2*time.Minute)
			if done.Job.Status != "READY" {
				t.Fatalf("job %s: %s", id, done.Raw)
			}
			aids = append(aids, done.Job.ArtifactID)
		}
		if aids[0] != aids[1] {
			t.Fatalf("same spec gave two artifacts: %v", aids)
		}
		if got := c.lb.lastBuilds(2); len(got) != 2 || got[0] == got[1] {
			t.Fatalf("builds went to replicas %v, want one each", got)
		}
		c.waitIdle(t)
		if built := c.freshBuilds(t) - buildsBefore; built != 1 {
			t.Errorf("the replicas built %d images for the two jobs of one spec, want 1", built)
		}
		var reusedBy []string
		for _, id := range jobs {
			if c.jobReused(id) {
				reusedBy = append(reusedBy, id)
			}
		}
		if len(reusedBy) != 1 {
			t.Errorf("jobs that reused the other's artifact: %v of %v, want exactly one", reusedBy, jobs)
		}
		var rows int
		c.db.QueryRow("SELECT COUNT(*) FROM t_cube_rootfs_artifact WHERE artifact_id = ?", aids[0]).Scan(&rows)
		if rows != 1 {
			t.Fatalf("%d artifact rows, want one", rows)
		}
		for i := range jobs {
			if e := c.call(http.MethodDelete, "/cube/template", map[string]any{"RequestID": "dr", "template_id": fmt.Sprintf("tpl-e2e-r%d", i)}); e.Ret.Code != 200 {
				t.Fatalf("delete: %s", e.Raw)
			}
		}
	})

	t.Run("DeleteKeepsSharedArtifactThenRemovesEverything", func(t *testing.T) {
		e := c.call(http.MethodDelete, "/cube/template", map[string]any{"RequestID": "d1", "template_id": "tpl-e2e-a"})
		if e.Ret.Code != 200 {
			t.Fatalf("delete a: %s", e.Raw)
		}
		for i := range c.nodes {
			if got := fileSHA(t, c.nodeArtifact(i, artifactID)); got != sha {
				t.Fatalf("deleting one template broke the artifact another uses on node %d", i+1)
			}
		}
		e = c.call(http.MethodDelete, "/cube/template", map[string]any{"RequestID": "d2", "template_id": "tpl-e2e-c"})
		if e.Ret.Code != 200 {
			t.Fatalf("delete c: %s", e.Raw)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			var rows int
			c.db.QueryRow("SELECT COUNT(*) FROM t_cube_rootfs_artifact WHERE artifact_id = ?", artifactID).Scan(&rows)
			gone := rows == 0
			for i := range c.nodes {
				if _, err := os.Stat(c.nodeArtifact(i, artifactID)); err == nil {
					gone = false
				}
			}
			if gone {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("artifact %s still present (row or node bytes) after deleting its last template", artifactID)
			}
			time.Sleep(200 * time.Millisecond)
		}
		blobs := c.bucket(t)
		if _, err := blobs.Stat(context.Background(), core.ArtifactObjectKey(artifactID)); !errors.Is(err, core.ErrNotFound) {
			t.Fatalf("S3 object of %s after deleting its last template: %v, want not found", artifactID, err)
		}
		for _, table := range []string{"t_cube_template_definition", "t_cube_template_replica", "t_cube_template_image_job", "t_cube_artifact_node_placement"} {
			var n int
			c.db.QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n)
			if n != 0 {
				t.Fatalf("%s still has %d rows", table, n)
			}
		}
		info := c.call(http.MethodGet, "/cube/template?template_id=tpl-e2e-a", nil)
		if info.Ret.Code != 130404 {
			t.Fatalf("deleted template: %s", info.Raw)
		}
	})

	t.Run("NodeBackGetsTheTemplateWithoutRedo", func(t *testing.T) {
		// Node 2 goes down between health probes (the master probes healthy
		// nodes only every CUBE_MASTER_NODE_PROBE_INTERVAL), so distribution
		// to it fails and its replica is FAILED.
		c.nodes[1].stop()
		img2 := pushImage(t, c.registry, "app2", 0)
		e := c.createFromImage("tpl-e2e-d", img2)
		if e.Ret.Code != 200 {
			t.Fatalf("create: %s", e.Raw)
		}
		done := c.waitJob(e.Job.JobID, 2*time.Minute)
		if done.Job.Status != "READY" || done.Job.TemplateStatus != "PARTIALLY_READY" || done.Job.ReadyNodeCount != 1 || done.Job.FailedNodeCount != 1 {
			t.Fatalf("with node 2 down: %s, want READY job with a PARTIALLY_READY template", done.Raw)
		}
		aid := done.Job.ArtifactID
		if _, err := os.Stat(c.nodeArtifact(1, aid)); err == nil {
			t.Fatal("node 2 was down but holds the artifact")
		}
		// The node comes back; nobody calls redo: the master's convergence
		// brings the template there on its own.
		c.nodes[1].start(t)
		waitTCP(t, c.nodeAddrs[1])
		c.waitTemplateStatus("tpl-e2e-d", "READY", 2*time.Minute)
		want := fileSHA(t, c.nodeArtifact(0, aid))
		if got := fileSHA(t, c.nodeArtifact(1, aid)); got != want {
			t.Fatalf("node 2 after convergence holds %s, want %s", got, want)
		}
	})

	t.Run("MigrateLegacyLocalArtifact", func(t *testing.T) {
		ctx := context.Background()
		img := pushImage(t, c.registry, "mig", 0)
		e := c.createFromImage("tpl-e2e-m", img)
		if e.Ret.Code != 200 || e.Job == nil {
			t.Fatalf("create: %s", e.Raw)
		}
		done := c.waitJob(e.Job.JobID, 2*time.Minute)
		if done.Job.Status != "READY" {
			t.Fatalf("create: %s", done.Raw)
		}
		aid, wantSHA := done.Job.ArtifactID, done.Job.Artifact.SHA256
		blobs := c.bucket(t)
		key := core.ArtifactObjectKey(aid)

		// Make it look like an artifact an old master kept on its own disk.
		local := filepath.Join(c.masterLocalDir, aid, aid+".ext4")
		if err := os.MkdirAll(filepath.Dir(local), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(c.nodeArtifact(0, aid))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(local, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := c.db.ExecContext(ctx, "UPDATE t_cube_rootfs_artifact SET ext4_path=?, object_key='', storage_backend='local' WHERE artifact_id=?", local, aid); err != nil {
			t.Fatal(err)
		}
		if err := blobs.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
		if _, err := blobs.Stat(ctx, key); !errors.Is(err, core.ErrNotFound) {
			t.Fatalf("object still there after delete: %v", err)
		}

		migrate := func() envelope {
			t.Helper()
			m := c.call(http.MethodPost, "/cube/template/migrate", map[string]any{"requestID": "mig-" + randHex(4), "template_id": "tpl-e2e-m"})
			if m.Ret.Code != 200 || m.Job == nil {
				t.Fatalf("migrate: %s", m.Raw)
			}
			deadline := time.Now().Add(time.Minute)
			for {
				j := c.call(http.MethodGet, "/cube/template/migrate?job_id="+m.Job.JobID, nil)
				if j.Job != nil && (j.Job.Status == "READY" || j.Job.Status == "FAILED") {
					return j
				}
				if time.Now().After(deadline) {
					t.Fatalf("migrate job not terminal: %s", j.Raw)
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
		rowKey := func() (objectKey, backend string) {
			t.Helper()
			if err := c.db.QueryRowContext(ctx, "SELECT COALESCE(object_key,''), COALESCE(storage_backend,'') FROM t_cube_rootfs_artifact WHERE artifact_id=?", aid).Scan(&objectKey, &backend); err != nil {
				t.Fatal(err)
			}
			return objectKey, backend
		}

		j := migrate()
		if j.Job.Status != "READY" {
			t.Fatalf("migrate: %s", j.Raw)
		}
		if k, be := rowKey(); k != key || be != "s3" {
			t.Fatalf("artifact row after migrate: object_key=%q storage_backend=%q", k, be)
		}
		info, err := blobs.Stat(ctx, key)
		if err != nil {
			t.Fatalf("object after migrate: %v", err)
		}
		rc, err := blobs.Open(ctx, key, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		io.Copy(h, rc)
		rc.Close()
		if got := hex.EncodeToString(h.Sum(nil)); got != wantSHA || info.Size != int64(len(b)) {
			t.Fatalf("stored object sha256 %s size %d, want %s size %d", got, info.Size, wantSHA, len(b))
		}
		if _, err := os.Stat(local); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("local copy not removed: %v", err)
		}
		if again := migrate(); again.Job.Status != "READY" || again.Job.JobID == j.Job.JobID {
			t.Fatalf("second migrate: %s", again.Raw)
		}

		// Store object and local copy both gone: only redo can help.
		if err := blobs.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
		gone := migrate()
		if gone.Job.Status != "FAILED" || !strings.Contains(gone.Job.ErrorMessage, "use redo") {
			t.Fatalf("migrate without any copy: %s, want FAILED with the redo hint", gone.Raw)
		}
		// And redo does help: it builds the artifact again (convergence,
		// which only ever adds nodes, never would).
		redo := c.call(http.MethodPost, "/cube/template/redo", map[string]any{"requestID": "redo-m", "template_id": "tpl-e2e-m"})
		if redo.Ret.Code != 200 || redo.Job == nil {
			t.Fatalf("redo: %s", redo.Raw)
		}
		if done := c.waitJob(redo.Job.JobID, 2*time.Minute); done.Job.Status != "READY" {
			t.Fatalf("redo after the bytes were lost: %s", done.Raw)
		}
		if _, err := blobs.Stat(ctx, key); err != nil {
			t.Fatalf("object after the redo: %v", err)
		}
	})

	t.Run("KilledTemplateCenterJobFailsThenRedoSucceeds", func(t *testing.T) {
		big := pushImage(t, c.registry, "big", 256<<20)
		e := c.createFromImage("tpl-e2e-k", big)
		if e.Ret.Code != 200 {
			t.Fatalf("create: %s", e.Raw)
		}
		// Kill the replica that took the build as soon as the build runs.
		deadline := time.Now().Add(60 * time.Second)
		for {
			j := c.call(http.MethodGet, "/cube/template/from-image?job_id="+e.Job.JobID, nil)
			if j.Job.Status == "RUNNING" {
				break
			}
			if time.Now().After(deadline) || j.Job.Status == "READY" || j.Job.Status == "FAILED" || j.Job.Status == "BUILT" {
				t.Fatalf("never saw the build running: %s", j.Raw)
			}
			time.Sleep(50 * time.Millisecond)
		}
		victim := c.lb.lastBuilds(1)[0]
		c.tc[victim].kill9()
		failed := c.waitJob(e.Job.JobID, 2*time.Minute)
		if failed.Job.Status != "FAILED" {
			t.Fatalf("after kill -9: %s, want FAILED by the surviving replica's reconciler", failed.Raw)
		}
		redo := c.call(http.MethodPost, "/cube/template/redo", map[string]any{"requestID": "redo-1", "template_id": "tpl-e2e-k"})
		if redo.Ret.Code != 200 || redo.Job == nil {
			t.Fatalf("redo: %s", redo.Raw)
		}
		done := c.waitJob(redo.Job.JobID, 3*time.Minute)
		if done.Job.Status != "READY" || done.Job.ReadyNodeCount != 2 {
			t.Fatalf("redo: %s", done.Raw)
		}
		c.tc[victim].start(t)
	})

	t.Run("NodeAddedGetsEveryReadyTemplate", func(t *testing.T) {
		ctx := context.Background()
		addr := freeAddr(t)
		data := filepath.Join(c.dir, "node3")
		node := &proc{name: "node-3", bin: c.nodes[0].bin, args: []string{"--listen", addr, "--data-dir", data, "--node-id", "node-3", "--master-urls", c.masterURL},
			env: []string{"CUBE_NODEAGENT_TOKEN=" + e2eNodeToken}}
		node.start(t)
		t.Cleanup(node.stop)
		waitTCP(t, addr)
		// An operator registers the node in the database; nobody calls redo.
		now := time.Now().UTC()
		if _, err := c.db.ExecContext(ctx, `INSERT INTO t_cube_template_node (node_id, node_ip, grpc_addr, instance_type, disabled, created_at, updated_at)
			VALUES ('node-3', '127.0.0.1', ?, 'cubebox', false, ?, ?)`, addr, now, now); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(4 * time.Minute)
		for {
			var missing []string
			rows, err := c.db.QueryContext(ctx, `SELECT d.template_id FROM t_cube_template_definition d
				WHERE d.status IN ('READY', 'PARTIALLY_READY') AND NOT EXISTS (SELECT 1 FROM t_cube_template_replica r
				WHERE r.template_id = d.template_id AND r.node_id = 'node-3' AND r.status = 'READY')`)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var tid string
				if err := rows.Scan(&tid); err != nil {
					t.Fatal(err)
				}
				missing = append(missing, tid)
			}
			rows.Close()
			if len(missing) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node-3 still lacks %v", missing)
			}
			time.Sleep(500 * time.Millisecond)
		}
		var n int
		if err := c.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM t_cube_template_replica WHERE node_id = 'node-3' AND status = 'READY'").Scan(&n); err != nil || n == 0 {
			t.Fatalf("node-3 holds %d READY templates (%v)", n, err)
		}
		t.Logf("node-3 got %d templates on its own", n)
	})
}

// bucket opens the cluster's artifacts in the test bucket.
func (c *cluster) bucket(t *testing.T) *artifactstore.Store {
	t.Helper()
	blobs, err := artifactstore.OpenS3(context.Background(), artifactstore.S3Config{
		Endpoint: testenv.Get(t, testenv.S3Endpoint), Bucket: testenv.Get(t, testenv.S3Bucket),
		AccessKey: testenv.Get(t, testenv.S3AccessKey), SecretKey: testenv.Get(t, testenv.S3SecretKey),
		Region: "us-east-1", UsePathStyle: true, Prefix: c.s3Prefix,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { blobs.Close() })
	return blobs
}
