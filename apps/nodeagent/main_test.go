package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/cubesandbox/templatecenter/adapters/cubelet"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/nodeagenttest"
)

// buildAgent compiles this command into a temporary directory.
func buildAgent(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not on PATH")
	}
	bin := filepath.Join(t.TempDir(), "nodeagent")
	out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// lockedBuffer collects the child's stderr while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// processHarness points the cubelet client at one nodeagent process shared
// by all subtests (the suite uses fresh ids in each).
type processHarness struct {
	addr    string
	dataDir string
	client  *cubelet.Client
}

func (h *processHarness) MakeAgent(context.Context) (ports.NodeAgent, ports.Node, error) {
	return h.client, ports.Node{ID: "node-proc", IP: "127.0.0.1", InstanceType: "cubebox", Addr: h.addr, Healthy: true}, nil
}

// ArtifactFile follows the agent's documented disk layout.
func (h *processHarness) ArtifactFile(instanceType, artifactID string) string {
	return filepath.Join(h.dataDir, instanceType, artifactID, artifactID+".ext4")
}

func (h *processHarness) Close() {}

func TestBinaryServesCubeletProtocol(t *testing.T) {
	bin := buildAgent(t)
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	addrFile := filepath.Join(dir, "addr")
	logs := &lockedBuffer{}
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--data-dir", dataDir, "--node-id", "node-proc", "--addr-file", addrFile)
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-exited
		}
	}()

	// Wait for the agent to say where it listens (the ceiling only stops a
	// broken binary from hanging the test).
	var addr string
	deadline := time.Now().Add(30 * time.Second)
	for addr == "" {
		select {
		case err := <-exited:
			t.Fatalf("nodeagent exited early: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodeagent wrote no address\n%s", logs.String())
		}
		if b, err := os.ReadFile(addrFile); err == nil && bytes.HasSuffix(b, []byte("\n")) {
			addr = strings.TrimSpace(string(b))
			break
		}
		time.Sleep(20 * time.Millisecond)
	}

	client := cubelet.New(cubelet.Options{})
	defer client.Close()
	h := &processHarness{addr: addr, dataDir: dataDir, client: client}
	nodeagenttest.RunConformanceTests(t, func(context.Context, *testing.T) (nodeagenttest.Harness, error) { return h, nil })

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err != nil {
		t.Fatalf("nodeagent did not exit cleanly on SIGTERM: %v\n%s", err, logs.String())
	}
	out := logs.String()
	for _, want := range []string{`"msg":"node agent listening"`, `"msg":"artifact downloaded"`, `"msg":"node agent stopped"`} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %s", want)
		}
	}
	// The suite's tokens all start with tok-, q- or wrong-.
	for _, secret := range []string{`tok-`, `token=q-`, `wrong-`} {
		if strings.Contains(out, secret) {
			t.Errorf("logs contain a token (%q)", secret)
		}
	}
}

// parse runs the command line without starting the agent.
func parse(t *testing.T, args []string, out io.Writer) (agentConfig, error) {
	t.Helper()
	var got agentConfig
	root, err := newRoot(func(_ *cobra.Command, c agentConfig) error { got = c; return nil })
	if err != nil {
		return got, err
	}
	root.SetArgs(args)
	root.SetOut(out)
	root.SetErr(out)
	return got, root.Execute()
}

func TestHelpSaysItBootsNoVMs(t *testing.T) {
	var out bytes.Buffer
	if _, err := parse(t, []string{"--help"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "does NOT boot VMs") || !strings.Contains(out.String(), "--node-id") {
		t.Fatalf("--help does not say it boots no VMs:\n%s", out.String())
	}
}

func TestFlagsFallBackToEnvironment(t *testing.T) {
	c, err := parse(t, nil, io.Discard)
	if err != nil || c.nodeID != "node-1" || c.listen != "127.0.0.1:9999" {
		t.Fatalf("defaults %+v %v: want node-1 on 127.0.0.1:9999 (the master's examples)", c, err)
	}
	t.Setenv("CUBE_NODEAGENT_LISTEN", "127.0.0.1:7777")
	t.Setenv("CUBE_NODEAGENT_DATA_DIR", "/tmp/x")
	t.Setenv("CUBE_NODEAGENT_NODE_ID", "n-env")
	c, err = parse(t, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.listen != "127.0.0.1:7777" || c.dataDir != "/tmp/x" || c.nodeID != "n-env" {
		t.Fatalf("config %+v", c)
	}
	c, err = parse(t, []string{"--node-id", "n-flag"}, io.Discard)
	if err != nil || c.nodeID != "n-flag" {
		t.Fatalf("flag did not win over env: %+v %v", c, err)
	}
	if _, err := parse(t, []string{"stray"}, io.Discard); err == nil {
		t.Fatal("a stray argument was accepted")
	}
	if _, err := parse(t, []string{"-listen", "x"}, io.Discard); err == nil {
		t.Fatal("a single-dash long flag was accepted (cobra-style flags take two dashes)")
	}
	if _, err := newLogger(agentConfig{logLevel: "loud", logFormat: "json"}, io.Discard); err == nil {
		t.Fatal("a bad log level was accepted")
	}
	var out bytes.Buffer
	if _, err := parse(t, []string{"--version"}, &out); err != nil || !strings.HasPrefix(out.String(), "nodeagent ") {
		t.Fatalf("--version: %q %v", out.String(), err)
	}
}
