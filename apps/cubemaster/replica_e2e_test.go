package main

import (
	"bytes"
	"context"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/cubelet"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// buildNodeAgent builds the nodeagent binary next to cubemaster's.
func buildNodeAgent(t *testing.T) string {
	t.Helper()
	out := filepath.Join(filepath.Dir(buildBinary(t)), "nodeagent")
	if _, err := os.Stat(out); err == nil {
		return out
	}
	if b, err := exec.Command("go", "build", "-o", out, "github.com/cubesandbox/templatecenter/apps/nodeagent").CombinedOutput(); err != nil {
		t.Fatalf("go build nodeagent: %v\n%s", err, b)
	}
	return out
}

// TestServeRestoresAReplicaGoneFromItsNode: a master and a node agent, as
// processes. Someone holding the node credential destroys the template's
// artifact directly on the node; the master's sweep finds it gone (a
// CreateImage presence check), marks the replica FAILED and converges it
// back: the node downloads the artifact again and the replica is READY.
// Before, the master kept reporting the node READY for a file it lacked.
func TestServeRestoresAReplicaGoneFromItsNode(t *testing.T) {
	dir := t.TempDir()
	const token = "replica-secret"
	data := bytes.Repeat([]byte("replica bytes "), 8192)
	tc := &fakeTC{artifact: data}
	tcSrv := httptest.NewServer(tc)
	defer tcSrv.Close()

	nodeAddr := freeAddr(t)
	m := startMaster(t,
		"CUBE_MASTER_DB_DSN=sqlite://"+filepath.Join(dir, "cube.db"),
		"CUBE_TEMPLATE_CENTER_ADDR="+tcSrv.URL,
		"CUBE_TEMPLATE_CALLBACK_TOKEN="+token,
		"CUBE_MASTER_NODE_TOKEN="+nodeToken,
		"CUBE_MASTER_NODES=node-1="+nodeAddr,
		"CUBE_MASTER_SWEEP_INTERVAL=1s",
		"CUBE_MASTER_LOG_LEVEL=debug",
	)
	nodeDir := filepath.Join(dir, "node")
	node := exec.Command(buildNodeAgent(t), "--listen", nodeAddr, "--data-dir", nodeDir, "--node-id", "node-1", "--master-urls", m.base)
	node.Env = cleanEnv("CUBE_NODEAGENT_TOKEN=" + nodeToken)
	nodeLogs := &testenv.Buffer{}
	node.Stdout, node.Stderr = nodeLogs, nodeLogs
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		node.Process.Kill()
		node.Wait()
		if t.Failed() {
			t.Logf("nodeagent log:\n%s", nodeLogs.String())
		}
	})

	waitHealthy(t, m.base+"/ready") // the node answers the master's probe
	jobID := m.createJob("tpl-gone")
	built, aid := builtReport(t, strings.Repeat("34", 32), data)
	if resp := call(t, http.MethodPost, m.base+wire.JobStatusPath(jobID), built, map[string]string{auth.Header: token}); resp.StatusCode != http.StatusOK {
		t.Fatalf("BUILT callback = %d", resp.StatusCode)
	}
	if final := m.waitJob(jobID); final.Job.Status != "READY" {
		t.Fatalf("job = %+v, want READY", final.Job)
	}
	ext4 := filepath.Join(nodeDir, core.DefaultInstanceType, aid, aid+".ext4")
	if got, err := os.ReadFile(ext4); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("node copy %s: %d bytes, %v; want the artifact", ext4, len(got), err)
	}

	// Straight to the node, as a stranger with the credential would.
	dial, _, err := cubelet.NodeCredentials{Token: nodeToken}.DialOptions()
	if err != nil {
		t.Fatal(err)
	}
	direct := cubelet.New(cubelet.Options{DialOptions: dial})
	defer direct.Close()
	if err := direct.DestroyImage(context.Background(), ports.Node{ID: "node-1", Addr: nodeAddr}, aid); err != nil {
		t.Fatalf("DestroyImage on the node: %v", err)
	}
	if _, err := os.Stat(ext4); !os.IsNotExist(err) {
		t.Fatalf("the node still has %s after DestroyImage: %v", ext4, err)
	}

	// The sweep runs every second; the ceiling only keeps a broken master
	// from hanging the test.
	destroyed := time.Now()
	deadline := destroyed.Add(60 * time.Second)
	for {
		got, err := os.ReadFile(ext4)
		if err == nil && bytes.Equal(got, data) && replicaStatus(t, m, "tpl-gone", "node-1") == "READY" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the artifact did not come back to the node (replica %s)", replicaStatus(t, m, "tpl-gone", "node-1"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the replica was back %v after the DestroyImage (sweep interval 1s)", time.Since(destroyed).Round(10*time.Millisecond))
	logs := m.logs.String()
	for _, want := range []string{"replica gone from its node: marked FAILED", "converging template onto nodes"} {
		if !strings.Contains(logs, want) {
			t.Errorf("master log lacks %q", want)
		}
	}
	m.stop()
}

// replicaStatus is the status the master reports for the template's
// replica on node ("" when it has none).
func replicaStatus(t *testing.T, m *master, templateID, nodeID string) string {
	t.Helper()
	var tpl struct {
		Replicas []struct {
			NodeID string `json:"node_id"`
			Status string `json:"status"`
		} `json:"replicas"`
	}
	decode(t, call(t, http.MethodGet, m.base+"/cube/template?template_id="+templateID, "", nil), &tpl)
	for _, r := range tpl.Replicas {
		if r.NodeID == nodeID {
			return r.Status
		}
	}
	return ""
}
