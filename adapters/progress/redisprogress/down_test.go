package redisprogress

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// cutProxy forwards to Redis until cut, then refuses every connection, as
// a Redis that went down does.
type cutProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln}
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go func() { io.Copy(out, in); out.Close() }()
			go func() { io.Copy(in, out); in.Close() }()
		}
	}()
	t.Cleanup(p.cut)
	return p
}

func (p *cutProxy) cut() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// With Redis down, every call fails within the sink's own bound even when
// the caller's context has none: a progress read is part of the job API's
// answer and a publish sits in a build's report loop, so neither may wait
// for Redis to come back.
func TestRedisDownFailsFast(t *testing.T) {
	p := newCutProxy(t, testenv.Get(t, testenv.RedisAddr))
	c, err := Dial(p.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := New(c, Options{Prefix: "cube:test:down:"})
	ctx := context.Background()
	if err := s.Publish(ctx, "job-1", ports.LiveProgress{Progress: 5}); err != nil {
		t.Fatal(err)
	}
	p.cut()
	for name, call := range map[string]func() error{
		"Get":     func() error { _, _, err := s.Get(ctx, "job-1"); return err },
		"Publish": func() error { return s.Publish(ctx, "job-1", ports.LiveProgress{Progress: 6}) },
		"Delete":  func() error { return s.Delete(ctx, "job-1") },
	} {
		done := make(chan error, 1)
		go func() { done <- call() }()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s with Redis down: no error", name)
			}
		case <-time.After(4 * DefaultOpTimeout):
			t.Errorf("%s with Redis down still waiting after %v", name, 4*DefaultOpTimeout)
		}
	}
}

// A sink made by Connect while Redis is down fails its calls instead of
// refusing to exist, and works once Redis is there.
func TestConnectWhileRedisIsDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there: Redis is down
	s := Connect(addr, Options{Prefix: "cube:test:lazy:"})
	defer s.Close()
	ctx := context.Background()
	if _, _, err := s.Get(ctx, "job-1"); err == nil {
		t.Fatal("Get with Redis down: no error")
	}
	// Redis comes up at that address.
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("address %s taken meanwhile: %v", addr, err)
	}
	target := testenv.Get(t, testenv.RedisAddr)
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			go func() { io.Copy(out, in); out.Close() }()
			go func() { io.Copy(in, out); in.Close() }()
		}
	}()
	defer ln.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := s.Publish(ctx, "job-1", ports.LiveProgress{Progress: 7})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Publish once Redis is up: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if p, ok, err := s.Get(ctx, "job-1"); err != nil || !ok || p.Progress != 7 {
		t.Fatalf("Get: %+v %v %v", p, ok, err)
	}
	s.Delete(ctx, "job-1") //nolint:errcheck
}
