package faults

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/internal/systemtest/faults/harness"
)

func (w *world) masterScenarios(t *testing.T) {
	c := w.c
	w.scenario(t, "KillMasterAfterBuilt", "the master killed right after it accepted the BUILT report, before any node got the artifact: after a restart its sweep replays the job to READY on every node (I6)", func(t *testing.T) map[string]any {
		ref, _ := c.PushImage("kill-master-built", 64<<10)
		for _, p := range c.NodeProxies {
			p.Pause()
		}
		var job string
		killed := make(chan struct{})
		c.Callbacks.Set(nil, func(cb harness.Callback) {
			if cb.JobID == job && cb.Status == "BUILT" && cb.Code == 200 {
				select {
				case <-killed:
				default:
					c.Masters[0].Kill9()
					close(killed)
				}
			}
		})
		job = w.create(t, "tpl-kill-master-built", ref)
		select {
		case <-killed:
		case <-time.After(time.Minute):
			var seen []string
			for _, cb := range c.Callbacks.Of(job) {
				seen = append(seen, fmt.Sprintf("%s/%s→%d", cb.Status, cb.Phase, cb.Code))
			}
			st, ph, _ := c.JobRow(job)
			t.Fatalf("no BUILT report reached the master (job %s/%s, reports %v)", st, ph, seen)
		}
		status, phase, aid := c.JobRow(job)
		for i := range c.Nodes {
			if _, err := os.Stat(c.NodeArtifact(i, aid)); err == nil {
				t.Errorf("node %d got the artifact before the master died", i+1)
			}
		}
		c.Callbacks.Set(nil, nil)
		for _, p := range c.NodeProxies {
			p.Sever()
			p.Resume()
		}
		c.StartMaster(0)
		c.AgeJob(t, job, 3*time.Minute)
		w.mustReady(t, job)
		return map[string]any{"job_when_killed": status + "/" + phase}
	})
	w.scenario(t, "KillMasterDuringDistribution", "the master killed while distributing (one node has the artifact, the other is hung): after a restart the job completes on every node (I2, I6)", func(t *testing.T) map[string]any {
		ref, _ := c.PushImage("kill-master-dist", 64<<10)
		c.NodeProxies[1].Pause()
		job := w.create(t, "tpl-kill-master-dist", ref)
		var aid string
		if !harness.WaitFor(time.Minute, func() bool {
			_, _, aid = c.JobRow(job)
			_, err := os.Stat(c.NodeArtifact(0, aid))
			return aid != "" && err == nil
		}) {
			t.Fatal("node 1 never got the artifact")
		}
		status, phase, _ := c.JobRow(job)
		c.Masters[0].Kill9()
		c.NodeProxies[1].Sever()
		c.NodeProxies[1].Resume()
		c.StartMaster(0)
		c.AgeJob(t, job, 3*time.Minute)
		w.mustReady(t, job)
		return map[string]any{"job_when_killed": status + "/" + phase}
	})
}
