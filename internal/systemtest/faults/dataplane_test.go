package faults

import (
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/internal/systemtest/faults/harness"
)

func (w *world) dataPlaneScenarios(t *testing.T) {
	c := w.c
	// killed runs one build to the point hold() reached, kills the replica
	// that runs it with SIGKILL, and checks that the surviving replica's
	// reconciler fails the job exactly once, that the killed replica
	// restarts clean and that a redo then succeeds.
	killed := func(t *testing.T, tpl string, hold func(ref, layer string) (release func()), want ...string) map[string]any {
		ref, dg := c.PushImage(tpl, 256<<10)
		release := hold(ref, dg)
		job := w.create(t, tpl, ref)
		j := w.waitPhase(t, job, time.Minute, want...)
		victim := c.TCLB.LastBuild()
		c.KillTC(victim)
		killedAt := time.Now()
		release()
		failed := w.mustFail(t, job, 2*time.Minute, "abandoned")
		toFail := time.Since(killedAt)
		// The surviving replica's reconciler or liveness sweep, or the
		// master's: exactly one of them.
		fails := 0
		for _, p := range append(append([]*harness.Proc(nil), c.TCs...), c.Masters...) {
			for _, line := range strings.Split(p.Log(), "\n") {
				if (strings.Contains(line, "failed stale job") || strings.Contains(line, "failed abandoned build job")) && strings.Contains(line, job) {
					fails++
				}
			}
		}
		if fails != 1 {
			t.Errorf("job %s was failed as abandoned %d times, want once", job, fails)
		}
		c.StartTC(victim)
		leftScratch := len(c.Leftovers())
		w.redo(t, tpl)
		return map[string]any{"killed_in": j.Status + "/" + j.Phase, "kill_to_failed_s": toFail.Seconds(), "error": short(failed.ErrorMessage),
			"leftovers_after_restart": leftScratch}
	}
	w.scenario(t, "KillDataPlanePulling", "a data-plane replica killed while pulling: the other replica's reconciler fails the job once (I6, I3); the killed replica restarts with no scratch left and its plugin gone; a redo succeeds", func(t *testing.T) map[string]any {
		return killed(t, "tpl-kill-pull", func(_, dg string) func() {
			return c.RegProxy.Add(harness.Rule{Target: harness.Blobs, Digest: dg, Kind: harness.FaultStall})
		}, "RUNNING/PULLING")
	})
	w.scenario(t, "KillDataPlaneUploading", "a data-plane replica killed while uploading: nothing is published, the claimed artifact row is failed as abandoned, the job fails once; a redo succeeds (I2, I4, I6)", func(t *testing.T) map[string]any {
		return killed(t, "tpl-kill-up", func(string, string) func() {
			c.S3.Add(harness.S3Rule{Kind: harness.S3Stall, Chunks: true})
			return c.S3.Clear
		}, "RUNNING/UPLOADING")
	})
	w.scenario(t, "KillDataPlaneAfterUpload", "a data-plane replica killed after publishing, before its BUILT report reached the master: the job fails once; the artifact is READY and whole, and a redo reuses it without building again (I2, I4, I6)", func(t *testing.T) map[string]any {
		ref, _ := c.PushImage("kill-built", 256<<10)
		var job string
		c.Callbacks.Set(func(cb harness.Callback) harness.CallbackAction {
			if cb.JobID == job && cb.Status == "BUILT" {
				c.KillTC(c.TCLB.LastBuild())
				return harness.Drop
			}
			return harness.Pass
		}, nil)
		job = w.create(t, "tpl-kill-built", ref)
		victim := -1
		harness.WaitFor(time.Minute, func() bool { victim = c.TCLB.LastBuild(); return !c.TCs[victim].Running() })
		failed := w.mustFail(t, job, 2*time.Minute, "abandoned")
		c.Callbacks.Set(nil, nil)
		_, _, aid := c.JobRow(job)
		st, _ := c.ArtifactRow(aid)
		if st != "READY" || !c.ObjectExists(aid) {
			t.Errorf("artifact %s after the kill: row %q, object %v; want READY with its object", aid, st, c.ObjectExists(aid))
		}
		c.CheckInvariants(t, true)
		c.StartTC(victim)
		puts := c.S3.Count(harness.S3Put, true)
		j := w.redo(t, "tpl-kill-built")
		if j.ArtifactID != aid {
			t.Errorf("redo built artifact %s, want the published %s reused", j.ArtifactID, aid)
		}
		if n := c.S3.Count(harness.S3Put, true) - puts; n != 0 {
			t.Errorf("redo uploaded %d objects, want the READY artifact reused", n)
		}
		return map[string]any{"error": short(failed.ErrorMessage)}
	})
}
