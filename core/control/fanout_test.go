package control

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestFanOutBoundsParallelism(t *testing.T) {
	for _, tc := range []struct{ workers, want int }{{1, 1}, {3, 3}, {0, 1}, {-1, 1}} {
		t.Run(fmt.Sprint(tc.workers), func(t *testing.T) {
			var active, peak atomic.Int32
			calls := make([]atomic.Int32, 12)
			fanOut(len(calls), tc.workers, func(i int) {
				calls[i].Add(1)
				now := active.Add(1)
				for {
					p := peak.Load()
					if now <= p || peak.CompareAndSwap(p, now) {
						break
					}
				}
				time.Sleep(5 * time.Millisecond) // let the others pile up
				active.Add(-1)
			})
			if p := int(peak.Load()); p > tc.want {
				t.Fatalf("%d calls ran at once, limit %d", p, tc.want)
			}
			for i := range calls {
				if n := calls[i].Load(); n != 1 {
					t.Errorf("index %d called %d times", i, n)
				}
			}
		})
	}
}

// TestFanOutWaits: fanOut returns only after every call has returned, so
// results written by index are complete.
func TestFanOutWaits(t *testing.T) {
	var mu sync.Mutex
	out := make([]string, 6)
	fanOut(len(out), 2, func(i int) {
		time.Sleep(time.Millisecond)
		mu.Lock()
		out[i] = fmt.Sprintf("node-%d", i)
		mu.Unlock()
	})
	for i, v := range out {
		if v != fmt.Sprintf("node-%d", i) {
			t.Errorf("out[%d] = %q after fanOut returned", i, v)
		}
	}
}
