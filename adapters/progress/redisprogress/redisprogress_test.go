package redisprogress

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/progresstest"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// harness gives every sink its own client, as separate replicas would
// have, all under one key prefix unique to the harness.
type harness struct {
	addr    string
	prefix  string
	clients []rueidis.Client
}

func (h *harness) MakeSink(context.Context) (ports.ProgressSink, error) {
	c, err := Dial(h.addr)
	if err != nil {
		return nil, err
	}
	h.clients = append(h.clients, c)
	return New(c, Options{Prefix: h.prefix}), nil
}

// HonoursContext: every call is a Redis round trip.
func (h *harness) HonoursContext() bool { return true }

func (h *harness) Close() {
	for _, c := range h.clients {
		c.Close()
	}
}

func testPrefix() string { return fmt.Sprintf("test:%d:", time.Now().UnixNano()) }

func TestConformance(t *testing.T) {
	addr := testenv.Get(t, testenv.RedisAddr)
	progresstest.RunConformanceTests(t, func(context.Context, *testing.T) (progresstest.Harness, error) {
		return &harness{addr: addr, prefix: testPrefix()}, nil
	})
}

func TestProgressExpires(t *testing.T) {
	c, err := Dial(testenv.Get(t, testenv.RedisAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	s := New(c, Options{Prefix: testPrefix(), TTL: time.Second})
	ctx := context.Background()
	if err := s.Publish(ctx, "j", ports.LiveProgress{Phase: core.PhasePulling, Progress: 5}); err != nil {
		t.Fatal(err)
	}
	ttl, err := s.client.Do(ctx, s.client.B().Pttl().Key(s.prefix+"j").Build()).AsInt64()
	if err != nil || ttl <= 0 || ttl > 1000 {
		t.Fatalf("PTTL = %d, %v; want a TTL of at most 1s", ttl, err)
	}
}
