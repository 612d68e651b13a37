package tcapp

import (
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/core/data"
)

// A build heartbeats often enough for the reconciler windows it is judged
// by: with windows shorter than the executor's default heartbeat, a live
// build in a long phase (a slow pull) would be failed as abandoned.
func TestHeartbeatFitsTheReconcilerWindows(t *testing.T) {
	d := config.Defaults().Reconcile
	if got := HeartbeatFor(d); got != data.DefaultHeartbeatEvery {
		t.Errorf("defaults: heartbeat %v, want the executor default %v", got, data.DefaultHeartbeatEvery)
	}
	short := d
	short.PullingStaleAfter = 10 * time.Second
	if got := HeartbeatFor(short); got != 2500*time.Millisecond {
		t.Errorf("pulling window 10s: heartbeat %v, want 2.5s", got)
	}
	legacy := d
	legacy.StaleAfter = 20 * time.Second
	if got := HeartbeatFor(legacy); got != 5*time.Second {
		t.Errorf("legacy running window 20s: heartbeat %v, want 5s", got)
	}
	tiny := d
	tiny.RunningStaleAfter = time.Millisecond
	if got := HeartbeatFor(tiny); got != 100*time.Millisecond {
		t.Errorf("1ms window: heartbeat %v, want the 100ms floor", got)
	}
}
