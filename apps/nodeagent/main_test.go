package main

import (
	"bytes"
	"context"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/cubesandbox/templatecenter/adapters/cubelet"
	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/core"
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

// processHarness points the cubelet client at one nodeagent process shared
// by all subtests (the suite uses fresh ids in each), started on the first
// subtest, when the suite's artifact server is known: the process
// downloads from it as from its master.
type processHarness struct {
	t       *testing.T
	bin     string
	extra   []string // more master URLs
	proc    *agentProc
	dataDir string
	client  *cubelet.Client
}

func (h *processHarness) start(cfg nodeagenttest.HarnessConfig) {
	if h.proc != nil {
		return
	}
	h.dataDir = filepath.Join(h.t.TempDir(), "data")
	urls := strings.Join(append([]string{cfg.ArtifactBaseURL}, h.extra...), ",")
	h.proc = startAgent(h.t, h.bin, []string{nodeTokenEnv}, "--data-dir", h.dataDir, "--node-id", "node-proc", "--master-urls", urls)
}

func (h *processHarness) MakeAgent(context.Context) (ports.NodeAgent, ports.Node, error) {
	return h.client, ports.Node{ID: "node-proc", IP: "127.0.0.1", InstanceType: "cubebox", Addr: h.proc.addr, Healthy: true}, nil
}

// ArtifactFile follows the agent's documented disk layout.
func (h *processHarness) ArtifactFile(instanceType, artifactID string) string {
	return filepath.Join(h.dataDir, instanceType, artifactID, artifactID+".ext4")
}

func (h *processHarness) Close() {}

// nodeToken is the credential the test processes share with their callers.
const nodeToken = "process-node-token-0123"

var nodeTokenEnv = config.NodeAgentTokenVariable + "=" + nodeToken

// agentProc is a running nodeagent.
type agentProc struct {
	cmd    *exec.Cmd
	addr   string
	logs   *testenv.Buffer
	exited chan error
}

// startAgent runs bin with env (added to a clean one) and args on a free
// loopback port and waits until it says where it listens.
func startAgent(t *testing.T, bin string, env []string, args ...string) *agentProc {
	t.Helper()
	addrFile := filepath.Join(t.TempDir(), "addr")
	p := &agentProc{logs: &testenv.Buffer{}, exited: make(chan error, 1)}
	p.cmd = exec.Command(bin, append([]string{"--listen", "127.0.0.1:0", "--addr-file", addrFile}, args...)...)
	p.cmd.Env = append(cleanEnv(), env...)
	p.cmd.Stderr = p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			<-p.exited
		}
	})
	// The ceiling only stops a broken binary from hanging the test.
	deadline := time.Now().Add(30 * time.Second)
	for p.addr == "" {
		select {
		case err := <-p.exited:
			t.Fatalf("nodeagent exited early: %v\n%s", err, p.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodeagent wrote no address\n%s", p.logs.String())
		}
		if b, err := os.ReadFile(addrFile); err == nil && bytes.HasSuffix(b, []byte("\n")) {
			p.addr = strings.TrimSpace(string(b))
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p
}

// stop sends SIGTERM and wants a clean exit.
func (p *agentProc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-p.exited; err != nil {
		t.Fatalf("nodeagent did not exit cleanly on SIGTERM: %v\n%s", err, p.logs.String())
	}
}

// cleanEnv is the test's environment without CUBE_* variables, so the
// developer's shell cannot change what the process sees.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CUBE_") {
			env = append(env, kv)
		}
	}
	return env
}

func TestBinaryServesCubeletProtocol(t *testing.T) {
	bin := buildAgent(t)
	// A listener that is no master: the agent must never connect to it,
	// whoever asks.
	can := newCanary(t)
	master := "http://127.0.0.1:1/cube" // a second master, never reached
	dial, _, err := cubelet.NodeCredentials{Token: nodeToken}.DialOptions()
	if err != nil {
		t.Fatal(err)
	}
	client := cubelet.New(cubelet.Options{DialOptions: dial})
	defer client.Close()
	h := &processHarness{t: t, bin: bin, extra: []string{master}, client: client}
	nodeagenttest.RunConformanceTests(t, func(_ context.Context, _ *testing.T, cfg nodeagenttest.HarnessConfig) (nodeagenttest.Harness, error) {
		h.start(cfg)
		return h, nil
	})
	if h.proc == nil {
		t.Fatal("the suite made no harness")
	}
	p := h.proc
	node := ports.Node{ID: "node-proc", Addr: p.addr}

	t.Run("RefusesCallsWithoutTheCredential", func(t *testing.T) {
		for name, token := range map[string]string{"none": "", "wrong": "process-node-token-0124"} {
			dial, _, err := cubelet.NodeCredentials{Token: token}.DialOptions()
			if err != nil {
				t.Fatal(err)
			}
			stranger := cubelet.New(cubelet.Options{DialOptions: dial})
			defer stranger.Close()
			// A stranger would destroy a replica the master believes in.
			f := filepath.Join(h.dataDir, "cubebox", "rfs-kept", "rfs-kept.ext4")
			if err := os.MkdirAll(filepath.Dir(f), 0o750); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f, []byte("kept"), 0o640); err != nil {
				t.Fatal(err)
			}
			err = stranger.DestroyImage(context.Background(), node, "rfs-kept")
			if status.Code(err) != codes.Unauthenticated {
				t.Fatalf("%s credential: DestroyImage = %v, want Unauthenticated", name, err)
			}
			if _, err := os.Stat(f); err != nil {
				t.Fatalf("%s credential: the refused DestroyImage removed the artifact: %v", name, err)
			}
			if err := stranger.CreateImage(context.Background(), node, core.NodeArtifact{ArtifactID: "rfs-canary",
				DownloadURL: "http://" + can.addr() + "/x", SHA256: strings.Repeat("0", 64), SizeBytes: 1}); err == nil {
				t.Fatalf("%s credential: CreateImage succeeded", name)
			}
			cc, err := grpc.NewClient(p.addr, append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
			if err != nil {
				t.Fatal(err)
			}
			_, err = healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{})
			cc.Close()
			if status.Code(err) != codes.Unauthenticated {
				t.Fatalf("%s credential: health = %v, want Unauthenticated", name, err)
			}
		}
		// The master's calls work: the whole suite ran with the credential.
		if err := client.DestroyImage(context.Background(), node, "rfs-kept"); err != nil {
			t.Fatalf("DestroyImage with the credential: %v", err)
		}
	})

	t.Run("DownloadsFromItsMastersOnly", func(t *testing.T) {
		err := client.CreateImage(context.Background(), node, core.NodeArtifact{ArtifactID: "rfs-canary",
			DownloadURL: "http://" + can.addr() + "/cube/template/artifact/download?token=t", Token: "t",
			SHA256: strings.Repeat("0", 64), SizeBytes: 1, InstanceType: "cubebox"})
		if err == nil || !strings.Contains(err.Error(), "not under a master base URL") {
			t.Fatalf("CreateImage from a URL outside the masters: %v, want refused", err)
		}
		if n := can.conns.Load(); n != 0 {
			t.Fatalf("the canary saw %d connections, want none", n)
		}
	})

	t.Run("NothingIsWorldReadable", func(t *testing.T) {
		n := 0
		err := filepath.WalkDir(h.dataDir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || path == h.dataDir {
				return err
			}
			st, err := os.Stat(path)
			if err != nil {
				return err
			}
			if st.Mode().Perm()&0o007 != 0 {
				t.Errorf("%s has mode %v: others may use it", path, st.Mode().Perm())
			}
			n++
			return nil
		})
		if err != nil || n == 0 {
			t.Fatalf("walk %s: %v (%d entries)", h.dataDir, err, n)
		}
	})

	p.stop(t)
	out := p.logs.String()
	for _, want := range []string{`"msg":"node agent listening"`, `"msg":"artifact downloaded"`, `"msg":"node agent stopped"`,
		`"msg":"call refused: missing or wrong node credential"`, `"msg":"download URL refused: not under a master base URL"`} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %s", want)
		}
	}
	// The suite's tokens all start with tok-, q- or wrong-.
	for _, secret := range []string{`tok-`, `token=q-`, `wrong-`, nodeToken, "process-node-token-0124"} {
		if strings.Contains(out, secret) {
			t.Errorf("logs contain a token (%q)", secret)
		}
	}
}

// TestBinaryFailsClosed: without a credential, with a short one, or
// without master URLs the agent exits at once naming the setting, before
// it listens.
func TestBinaryFailsClosed(t *testing.T) {
	bin := buildAgent(t)
	tests := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"no credential", nil, []string{"--master-urls", "http://m:8089"}, "CUBE_NODEAGENT_TOKEN is not set"},
		{"blank credential", []string{"CUBE_NODEAGENT_TOKEN=  "}, []string{"--master-urls", "http://m:8089"}, "CUBE_NODEAGENT_TOKEN is not set"},
		{"short credential", []string{"CUBE_NODEAGENT_TOKEN=short"}, []string{"--master-urls", "http://m:8089"}, "CUBE_NODEAGENT_TOKEN is shorter than 16"},
		{"no master URLs", []string{nodeTokenEnv}, nil, "--master-urls (CUBE_NODEAGENT_MASTER_URLS) is not set"},
		{"bad master URL", []string{nodeTokenEnv, "CUBE_NODEAGENT_MASTER_URLS=m:8089"}, nil, "not an absolute http(s) URL"},
		{"bad file mode", []string{nodeTokenEnv}, []string{"--master-urls", "http://m:8089", "--file-mode", "0444"}, "--file-mode"},
		{"key without certificate", []string{nodeTokenEnv}, []string{"--master-urls", "http://m:8089", "--tls-key", "k.pem"}, "--tls-cert and --tls-key go together"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addrFile := filepath.Join(t.TempDir(), "addr")
			cmd := exec.Command(bin, append([]string{"--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--addr-file", addrFile}, tc.args...)...)
			cmd.Env = append(cleanEnv(), tc.env...)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("nodeagent started:\n%s", out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Fatalf("output does not say %q:\n%s", tc.want, out)
			}
			if _, err := os.Stat(addrFile); err == nil {
				t.Fatal("nodeagent listened before refusing")
			}
		})
	}
}

// canary counts connections to an address that is not a master.
type canary struct {
	ln    net.Listener
	conns atomic.Int64
}

func newCanary(t *testing.T) *canary {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &canary{ln: ln}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			c.conns.Add(1)
			conn.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return c
}

func (c *canary) addr() string { return c.ln.Addr().String() }

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
