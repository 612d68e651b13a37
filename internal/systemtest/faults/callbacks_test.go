package faults

import (
	"net/http"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/internal/systemtest/faults/harness"
)

func (w *world) callbackScenarios(t *testing.T) {
	c := w.c
	w.scenario(t, "CallbackDuplicated", "every status report delivered twice: each is applied once, the job still goes PENDING → RUNNING → BUILT → READY (I3)", func(t *testing.T) map[string]any {
		ref, _ := c.PushImage("cb-dup", 64<<10)
		var job string
		c.Callbacks.Set(func(cb harness.Callback) harness.CallbackAction {
			if cb.JobID == job {
				return harness.Duplicate
			}
			return harness.Pass
		}, nil)
		job = w.create(t, "tpl-cb-dup", ref)
		w.mustReady(t, job)
		stale, _ := harness.Metrics(c.MasterURLs[0], `cube_template_status_callbacks_total{result="stale"}`)
		return map[string]any{"reports_doubled": len(c.Callbacks.Of(job)), "master_stale_total": stale, "transitions": w.mon.Transitions(job)}
	})
	w.scenario(t, "CallbackLostThenLate", "the BUILT report lost until the reconciler failed the job, then delivered late: the master acknowledges it without reviving the job (I3); a redo reuses the artifact (I2)", func(t *testing.T) map[string]any {
		ref, _ := c.PushImage("cb-late", 64<<10)
		var job string
		dropped := 0
		c.Callbacks.Set(func(cb harness.Callback) harness.CallbackAction {
			if cb.JobID != job || cb.Status != "BUILT" {
				return harness.Pass
			}
			if st, _, _ := c.JobRow(job); st != "FAILED" {
				dropped++
				return harness.Drop
			}
			return harness.Pass
		}, nil)
		job = w.create(t, "tpl-cb-late", ref)
		w.mustFail(t, job, time.Minute, "abandoned")
		var late harness.Callback
		if !harness.WaitFor(time.Minute, func() bool {
			for _, cb := range c.Callbacks.Of(job) {
				if cb.Status == "BUILT" && cb.Action == harness.Pass {
					late = cb
					return true
				}
			}
			return false
		}) {
			t.Fatal("the late BUILT report never came")
		}
		time.Sleep(500 * time.Millisecond)
		if st, _, _ := c.JobRow(job); st != "FAILED" {
			t.Errorf("job %s is %s after the late BUILT report, want it to stay FAILED", job, st)
		}
		c.Callbacks.Set(nil, nil)
		_, _, aid := c.JobRow(job)
		j := w.redo(t, "tpl-cb-late")
		if j.ArtifactID != aid {
			t.Errorf("redo built %s, want the published %s reused", j.ArtifactID, aid)
		}
		return map[string]any{"dropped": dropped, "late_answer": late.Code, "late_body": short(late.Answer)}
	})
	w.scenario(t, "CallbackReordered", "reports replayed out of order after READY (RUNNING, then BUILT) are acknowledged or refused, never applied (I3); reports without the callback token or with a wrong one are refused with 401", func(t *testing.T) map[string]any {
		ref, _ := c.PushImage("cb-order", 64<<10)
		job := w.create(t, "tpl-cb-order", ref)
		w.mustReady(t, job)
		var running, built *harness.Callback
		for _, cb := range c.Callbacks.Of(job) {
			cb := cb
			if cb.Status == "RUNNING" && running == nil {
				running = &cb
			}
			if cb.Status == "BUILT" {
				built = &cb
			}
		}
		if running == nil || built == nil {
			t.Fatalf("reports seen: %d, no RUNNING or BUILT to replay", len(c.Callbacks.Of(job)))
		}
		codes := map[string]int{}
		for _, cb := range []*harness.Callback{running, built} {
			code, _, err := harness.Replay(c.MasterURLs[0], *cb)
			if err != nil {
				t.Fatal(err)
			}
			codes[cb.Status] = code
		}
		// A report without the callback token, or with another one, is
		// refused before it is read.
		const tokenHeader = "X-Cube-Template-Callback-Token"
		forged := *running
		forged.Header = forged.Header.Clone()
		forged.Header.Del(tokenHeader)
		noToken, _, err := harness.Replay(c.MasterURLs[0], forged)
		if err != nil {
			t.Fatal(err)
		}
		forged.Header.Set(tokenHeader, "not-the-token")
		wrongToken, _, err := harness.Replay(c.MasterURLs[0], forged)
		if err != nil {
			t.Fatal(err)
		}
		if noToken != http.StatusUnauthorized || wrongToken != http.StatusUnauthorized {
			t.Errorf("reports without the token / with a wrong one answered %d / %d, want 401", noToken, wrongToken)
		}
		if st, _, _ := c.JobRow(job); st != "READY" {
			t.Errorf("job %s is %s after the replays, want READY", job, st)
		}
		return map[string]any{"answers": codes, "no_token": noToken, "wrong_token": wrongToken}
	})
}
