package tcapp

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/apps/internal/startup"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// The served data plane applies the server timeouts it is given: a client
// trickling its headers is hung up on. (The timeouts themselves are
// tested in package startup.)
func TestRunCutsOffSlowClients(t *testing.T) {
	dir := t.TempDir()
	cfg := config.DefaultsFor(config.Dirs{State: dir})
	cfg.CallbackToken = "a-test-callback-token-of-some-length"
	cfg.MasterAddr = "http://127.0.0.1:1"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Config: cfg, ServerTimeouts: startup.ServerTimeouts{ReadHeader: 200 * time.Millisecond}}, ln)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	testenv.CheckHangsUpOnTrickle(t, ln.Addr().String(), "/health", "the data plane")
}
