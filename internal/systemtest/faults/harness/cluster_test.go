package harness

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	code := m.Run()
	Cleanup()
	os.Exit(code)
}

// TestStartNodeMovesOffATakenPort: a node agent whose port another process
// took after it was picked exits at once; a wait for the port alone saw
// the other process and left the cluster a node short (jobs waited for it
// until the suite's timeout). It is started again on a new port, which its
// proxy forwards to.
func TestStartNodeMovesOffATakenPort(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	dir := t.TempDir()
	px := NewTCPProxy(t, addr)
	p := &Proc{Name: "node-1", Bin: filepath.Join(Binaries(t), "nodeagent"), LogPath: filepath.Join(dir, "node-1.log"),
		Args: []string{"--listen", addr, "--data-dir", filepath.Join(dir, "node-1"), "--node-id", "node-1", "--master-urls", "http://127.0.0.1:1"},
		Env:  []string{"CUBE_NODEAGENT_TOKEN=node-" + RandHex(16)}}
	c := &Cluster{Nodes: []*Proc{p}, NodeAddrs: []string{addr}, NodeProxies: []*TCPProxy{px}}
	c.startNode(t, 0)
	defer p.Stop()
	if c.NodeAddrs[0] == addr || !p.Running() {
		t.Fatalf("node on %s (running %v), want it moved off the taken %s", c.NodeAddrs[0], p.Running(), addr)
	}
	// The proxy the masters use reaches the agent, not the port's taker.
	go func() {
		for {
			conn, err := taken.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	conn, err := net.DialTimeout("tcp", px.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if px.target != c.NodeAddrs[0] {
		t.Fatalf("proxy forwards to %s, want %s", px.target, c.NodeAddrs[0])
	}
}
