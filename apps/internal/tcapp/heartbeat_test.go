package tcapp

import (
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/apps/config"
)

// A build heartbeats often enough for every window it is judged by: a
// sixth of the liveness timeout, and a quarter of a reconciler window set
// shorter than that, so a live build in a long phase (a slow pull) is
// never failed as abandoned.
func TestHeartbeatFitsTheWindows(t *testing.T) {
	d := config.Defaults()
	for _, tc := range []struct {
		name string
		set  func(c *config.Config)
		want time.Duration
	}{
		{"defaults: a sixth of the 90s liveness timeout", func(*config.Config) {}, 15 * time.Second},
		{"liveness timeout 30s", func(c *config.Config) { c.BuildLiveness = 30 * time.Second }, 5 * time.Second},
		{"pulling window 10s", func(c *config.Config) { c.Reconcile.PullingStaleAfter = 10 * time.Second }, 2500 * time.Millisecond},
		{"legacy running window 20s", func(c *config.Config) { c.Reconcile.StaleAfter = 20 * time.Second }, 5 * time.Second},
		{"1ms window: the 100ms floor", func(c *config.Config) { c.Reconcile.RunningStaleAfter = time.Millisecond }, 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := d
			tc.set(&c)
			if got := HeartbeatFor(c); got != tc.want {
				t.Errorf("heartbeat %v, want %v", got, tc.want)
			}
		})
	}
}

// The work directory remembers the last data plane that ran on it.
func TestRecordInstance(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ id, previous string }{{"tc-a", ""}, {"tc-b", "tc-a"}, {"tc-c", "tc-b"}} {
		prev, err := RecordInstance(dir, tc.id)
		if err != nil || prev != tc.previous {
			t.Fatalf("recording %s: previous %q, %v; want %q", tc.id, prev, err, tc.previous)
		}
	}
}
