package redisprogress

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/internal/testenv"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/progresstest"
)

func newSink(t *testing.T, ttl time.Duration) *Sink {
	c, err := Dial(testenv.Get(t, testenv.RedisAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return New(c, Options{Prefix: fmt.Sprintf("test:%d:", time.Now().UnixNano()), TTL: ttl})
}

func TestConformance(t *testing.T) {
	progresstest.RunConformanceTests(t, func(t *testing.T) ports.ProgressSink { return newSink(t, 0) })
}

func TestProgressExpires(t *testing.T) {
	s := newSink(t, time.Second)
	ctx := context.Background()
	if err := s.Publish(ctx, "j", ports.LiveProgress{Phase: core.PhasePulling, Progress: 5}); err != nil {
		t.Fatal(err)
	}
	ttl, err := s.client.Do(ctx, s.client.B().Pttl().Key(s.prefix+"j").Build()).AsInt64()
	if err != nil || ttl <= 0 || ttl > 1000 {
		t.Fatalf("PTTL = %d, %v; want a TTL of at most 1s", ttl, err)
	}
}
