package masterapp

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/apps/internal/startup"
)

// The served master applies the server timeouts it is given: a client
// trickling its headers is hung up on. (The timeouts themselves are
// tested in package startup.)
func TestRunCutsOffSlowClients(t *testing.T) {
	dir := t.TempDir()
	cfg := config.DefaultsFor(config.Dirs{State: dir})
	cfg.Master.DBDSN = "sqlite://" + dir + "/master.db"
	cfg.CallbackToken = "a-test-callback-token-of-some-length"
	cfg.Master.TemplateCenterAddr = "http://127.0.0.1:1"
	cfg.Master.Auth.BearerTokens = []string{"a-test-bearer-token-of-some-length"}
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

	var c net.Conn
	for range 200 { // until the listener serves (the store is migrated first)
		if c, err = net.Dial("tcp", ln.Addr().String()); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		req := "GET /notify/health HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-Slow: aaaaaaaaaaaaaaaaaaaa\r\n", 40)
		for i := range len(req) {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := c.Write([]byte{req[i]}); err != nil {
				return
			}
		}
	}()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the master kept a trickling client's connection open")
	}
	// net/http may say 400 as it hangs up; the health route's 200 would
	// mean the request got through.
	if len(b) > 0 && !strings.HasPrefix(string(b), "HTTP/1.1 400 ") {
		t.Fatalf("the master answered a request whose headers never finished: %q", b)
	}
}
