package faults

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/internal/systemtest/faults/harness"
)

// world is the cluster the scenarios share: two data-plane replicas, one
// master, two nodes, a private MariaDB and Redis (so they can be killed),
// and every proxy. Scenarios run one after the other; each leaves the
// cluster clean (its templates deleted, nothing left behind) for the next.
type world struct {
	c   *harness.Cluster
	api *harness.Client
	mon *harness.Monitor
}

func newWorld(t *testing.T) *world {
	// The build limit is above the longest build a scenario must finish
	// or fail on its own (RegistryStalled's retries, about 50 s) and is
	// what ends RegistryTrickle.
	c := harness.Start(t, harness.Options{PrivateDB: true, PrivateRedis: true,
		TCEnv: []string{"CUBE_TEMPLATE_CENTER_BUILD_TIMEOUT=" + buildTimeout.String()}})
	return &world{c: c, api: c.API(), mon: c.Watch(t)}
}

// buildTimeout is CUBE_TEMPLATE_CENTER_BUILD_TIMEOUT of the suite's
// template centers.
const buildTimeout = 80 * time.Second

// sc is one fault scenario: fn injects the fault and checks the outcome,
// returning the scenario's figures.
type sc struct {
	name, proves string
	fn           func(t *testing.T) map[string]any
}

// scenario runs one scenario as a subtest (see group).
func (w *world) scenario(t *testing.T, name, proves string, fn func(t *testing.T) map[string]any) {
	w.group(t, "", sc{name, proves, fn})
}

// group runs scenarios as subtests (in parallel when named: their faults
// must not overlap), then clears every fault, checks the invariants on the
// settled state, deletes every template and requires that the cluster
// holds nothing (rows, objects, node files, scratch, plugin processes).
func (w *world) group(t *testing.T, name string, scs ...sc) {
	type result struct {
		took time.Duration
		vals map[string]any
		t    *testing.T
	}
	results := make([]result, len(scs))
	runAll := func(t *testing.T) {
		for i, s := range scs {
			t.Run(s.name, func(t *testing.T) {
				if name != "" {
					t.Parallel()
				}
				start := time.Now()
				vals := s.fn(t)
				results[i] = result{took: time.Since(start), vals: vals, t: t}
			})
		}
	}
	settle := func(t *testing.T) {
		w.c.RegProxy.Clear()
		w.c.S3.Clear()
		w.c.Callbacks.Set(nil, nil)
		for _, p := range w.c.NodeProxies {
			p.Resume()
		}
		w.c.TCLB.Pin(-1)
		w.c.CheckInvariants(t, true)
		w.c.CheckIdle(t, time.Minute)
		w.c.DeleteAll(t, time.Minute)
		w.c.CheckClean(t, 45*time.Second)
		viol := w.mon.Violations()
		if len(viol) > 0 {
			t.Errorf("monitor: %s", strings.Join(viol, "; "))
		}
		for i, s := range scs {
			r := results[i]
			vals := r.vals
			if n := w.c.Partials(); n > 0 {
				if vals == nil {
					vals = map[string]any{}
				}
				vals["partial_layer_downloads_kept"] = n
			}
			outcome := "pass"
			if t.Failed() || len(viol) > 0 || r.t == nil || r.t.Failed() {
				outcome = "FAIL"
			}
			harness.Record(t, harness.Figure{Suite: "faults", Name: s.name, Outcome: outcome, Seconds: r.took.Seconds(), Values: vals, Proves: s.proves})
		}
	}
	if name == "" {
		t.Run(scs[0].name, func(t *testing.T) {
			start := time.Now()
			vals := scs[0].fn(t)
			results[0] = result{took: time.Since(start), vals: vals, t: t}
			settle(t)
		})
		return
	}
	t.Run(name, func(t *testing.T) {
		t.Run("run", runAll)
		settle(t)
	})
}

// create starts a template and fails the test if the API refuses.
func (w *world) create(t *testing.T, tpl, ref string) string {
	t.Helper()
	a := w.api.Create(tpl, ref)
	if !a.OK() || a.Job == nil {
		t.Fatalf("create %s: %s", tpl, a)
	}
	return a.Job.JobID
}

// wait waits for a terminal job.
func (w *world) wait(t *testing.T, jobID string, timeout time.Duration) *harness.Job {
	t.Helper()
	a := w.api.WaitJob(jobID, timeout)
	if a.Job == nil || !a.Job.Terminal() {
		t.Fatalf("job %s not terminal after %v: %s", jobID, timeout, a)
	}
	return a.Job
}

// waitPhase waits until the job is in one of the statuses/phases
// ("RUNNING/PULLING", "BUILT", ...).
func (w *world) waitPhase(t *testing.T, jobID string, timeout time.Duration, want ...string) *harness.Job {
	t.Helper()
	a := w.api.WaitJobUntil(jobID, timeout, func(j *harness.Job) bool {
		for _, s := range want {
			if s == j.Status || s == j.Status+"/"+j.Phase {
				return true
			}
		}
		return j.Terminal()
	})
	if a.Job == nil {
		t.Fatalf("job %s: %s", jobID, a)
	}
	for _, s := range want {
		if s == a.Job.Status || s == a.Job.Status+"/"+a.Job.Phase {
			return a.Job
		}
	}
	t.Fatalf("job %s never reached %v: %s/%s %s", jobID, want, a.Job.Status, a.Job.Phase, a.Job.ErrorMessage)
	return nil
}

// mustReady waits for the job and requires READY on every node.
func (w *world) mustReady(t *testing.T, jobID string) *harness.Job {
	t.Helper()
	j := w.wait(t, jobID, 2*time.Minute)
	if j.Status != "READY" || j.ReadyNodeCount != len(w.c.Nodes) {
		t.Fatalf("job %s: %s/%s ready on %d of %d nodes: %s", jobID, j.Status, j.Phase, j.ReadyNodeCount, len(w.c.Nodes), j.ErrorMessage)
	}
	return j
}

// mustFail waits for the job and requires FAILED with a message
// containing one of wants (any message if none).
func (w *world) mustFail(t *testing.T, jobID string, timeout time.Duration, wants ...string) *harness.Job {
	t.Helper()
	j := w.wait(t, jobID, timeout)
	if j.Status != "FAILED" {
		t.Fatalf("job %s: %s, want FAILED", jobID, j.Status)
	}
	ok := len(wants) == 0
	for _, s := range wants {
		if strings.Contains(strings.ToLower(j.ErrorMessage), strings.ToLower(s)) {
			ok = true
		}
	}
	if !ok {
		t.Errorf("job %s failed with %q, want one of %q", jobID, j.ErrorMessage, wants)
	}
	return j
}

// redo redoes a template and requires READY on every node.
func (w *world) redo(t *testing.T, tpl string) *harness.Job {
	t.Helper()
	a := w.api.Redo(tpl)
	if !a.OK() || a.Job == nil {
		t.Fatalf("redo %s: %s", tpl, a)
	}
	return w.mustReady(t, a.Job.JobID)
}

func short(s string) string {
	if len(s) > 160 {
		return s[:160] + "..."
	}
	return s
}

var _ = fmt.Sprint

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
