package cubelet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/ports"
)

func nodes(n int) []ports.Node {
	out := make([]ports.Node, n)
	for i := range out {
		out[i] = ports.Node{ID: fmt.Sprintf("node-%d", i)}
	}
	return out
}

func TestFanOutBoundsParallelism(t *testing.T) {
	tests := []struct{ limit, want int }{{1, 1}, {3, 3}, {0, DefaultFanOut}, {-1, DefaultFanOut}}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.limit), func(t *testing.T) {
			var active, peak atomic.Int32
			errs := FanOut(context.Background(), nodes(12), tc.limit, func(ctx context.Context, n ports.Node) error {
				now := active.Add(1)
				for {
					p := peak.Load()
					if now <= p || peak.CompareAndSwap(p, now) {
						break
					}
				}
				time.Sleep(5 * time.Millisecond) // let the others pile up
				active.Add(-1)
				return nil
			})
			if len(errs) != 12 {
				t.Fatalf("%d results for 12 nodes", len(errs))
			}
			if p := int(peak.Load()); p > tc.want {
				t.Fatalf("%d calls ran at once, limit %d", p, tc.want)
			}
		})
	}
}

func TestFanOutReportsPerNode(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	errs := FanOut(context.Background(), nodes(6), 2, func(ctx context.Context, n ports.Node) error {
		mu.Lock()
		seen[n.ID]++
		mu.Unlock()
		if n.ID == "node-1" || n.ID == "node-4" {
			return errors.New("failed " + n.ID)
		}
		return nil
	})
	for i, err := range errs {
		id := fmt.Sprintf("node-%d", i)
		if seen[id] != 1 {
			t.Errorf("%s called %d times", id, seen[id])
		}
		wantErr := i == 1 || i == 4
		if (err != nil) != wantErr || (err != nil && err.Error() != "failed "+id) {
			t.Errorf("errs[%d] = %v", i, err)
		}
	}
}

func TestFanOutStopsStartingAfterCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var calls atomic.Int32
	errs := FanOut(ctx, nodes(8), 1, func(ctx context.Context, n ports.Node) error {
		calls.Add(1)
		if n.ID == "node-2" {
			cancel()
		}
		return nil
	})
	if c := calls.Load(); c != 3 {
		t.Fatalf("%d calls with limit 1 and cancel in the third, want 3", c)
	}
	for i, err := range errs {
		if want := i > 2; want != errors.Is(err, context.Canceled) {
			t.Errorf("errs[%d] = %v", i, err)
		}
	}
}
