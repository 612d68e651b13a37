package faults

import (
	"net/http"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/internal/systemtest/faults/harness"
)

func (w *world) dbScenarios(t *testing.T) {
	c := w.c
	// settleAfter waits for a job disturbed by a database restart: it must
	// end (I6) on its own, or, for a job left BUILT or mid-resume by a lost
	// lock, once the masters' sweep replays it; a FAILED one is redone.
	settleAfter := func(t *testing.T, job, tpl string) map[string]any {
		a := w.api.WaitJob(job, 45*time.Second)
		replayed := false
		if a.Job != nil && !a.Job.Terminal() {
			c.AgeJob(t, job, 3*time.Minute)
			replayed = true
		}
		j := w.wait(t, job, 2*time.Minute)
		vals := map[string]any{"outcome": j.Status, "error": short(j.ErrorMessage), "needed_sweep": replayed}
		if j.Status == "FAILED" {
			w.redo(t, tpl)
		} else if j.Status != "READY" || j.ReadyNodeCount != len(c.Nodes) {
			t.Errorf("job %s after the restart: %s on %d nodes", job, j.Status, j.ReadyNodeCount)
		}
		return vals
	}
	w.scenario(t, "MariaDBRestartMidBuild", "MariaDB killed and restarted while a build pulls: the services reconnect, the job ends (I6) and the template ends READY (after a redo if the build failed), with no duplicate job (I1)", func(t *testing.T) map[string]any {
		ref, dg := c.PushImage("db-build", 256<<10)
		heal := c.RegProxy.Add(harness.Rule{Target: harness.Blobs, Digest: dg, Kind: harness.FaultStall})
		job := w.create(t, "tpl-db-build", ref)
		w.waitPhase(t, job, time.Minute, "RUNNING/PULLING")
		harness.WaitFor(10*time.Second, func() bool { return faultsServed(c, dg, harness.FaultStall) > 0 })
		c.Maria.Kill9()
		time.Sleep(time.Second)
		c.Maria.Start(t)
		heal()
		return settleAfter(t, job, "tpl-db-build")
	})
	w.scenario(t, "MariaDBRestartMidResume", "MariaDB killed and restarted while the master distributes: the job ends READY on every node (I2, I6)", func(t *testing.T) map[string]any {
		ref, _ := c.PushImage("db-resume", 64<<10)
		for _, p := range c.NodeProxies {
			p.Pause()
		}
		job := w.create(t, "tpl-db-resume", ref)
		j := w.waitPhase(t, job, time.Minute, "BUILT", "RUNNING/DISTRIBUTING")
		c.Maria.Kill9()
		time.Sleep(time.Second)
		c.Maria.Start(t)
		for _, p := range c.NodeProxies {
			p.Resume()
		}
		vals := settleAfter(t, job, "tpl-db-resume")
		vals["restarted_in"] = j.Status + "/" + j.Phase
		return vals
	})
	w.scenario(t, "RedisDown", "with Redis down, builds go on and the job API answers from the stored row (live progress degrades), a data-plane replica restarted meanwhile serves again: the template ends READY", func(t *testing.T) map[string]any {
		c.Redis.Kill9()
		ref, _ := c.PushImage("redis-down", 1<<20)
		job := w.create(t, "tpl-redis-down", ref)
		reads, fails := 0, 0
		var slowest time.Duration
		for {
			a := w.api.Job(job)
			st := w.api.Call(http.MethodGet, "/cube/template/build/"+job+"/status", nil)
			reads += 2
			slowest = max(slowest, a.Took, st.Took)
			if !a.OK() {
				fails++
			}
			if !st.OK() {
				fails++
			}
			if a.Job.Terminal() || reads > 400 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if fails > 0 {
			t.Errorf("%d of %d job reads failed while Redis was down", fails, reads)
		}
		w.mustReady(t, job)
		warnings := 0
		for _, p := range c.TCs {
			warnings += p.Count("publish live progress")
		}
		// A replica restarting during the outage.
		c.TCs[1].Stop()
		c.TCs[1].Start(t)
		restarted := harness.WaitFor(20*time.Second, func() bool {
			resp, err := http.Get(c.TCURLs[1] + "/health")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
		if !restarted {
			t.Errorf("templatecenter-1 does not start while Redis is down:\n%s", c.TCs[1].Tail(1500))
		}
		c.Redis.Start(t)
		if !c.TCs[1].Running() {
			c.TCs[1].Stop()
			c.StartTC(1)
		}
		return map[string]any{"job_reads": reads, "failed_reads": fails, "slowest_read_s": slowest.Seconds(),
			"progress_publish_warnings": warnings, "replica_restarts_without_redis": restarted}
	})
}
