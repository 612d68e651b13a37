package faults

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/data"
	"github.com/cubesandbox/templatecenter/internal/systemtest/faults/harness"
	"github.com/cubesandbox/templatecenter/ports"
)

// grantAll is a locker that never excludes anyone: with it, reconcilers
// run their ticks at the same moment, and only the store's compare-and-set
// keeps them from failing a job twice.
type grantAll struct{}

func (grantAll) Lock(_ context.Context, name string) (ports.Lock, error)    { return grant(name), nil }
func (grantAll) TryLock(_ context.Context, name string) (ports.Lock, error) { return grant(name), nil }

type grant string

func (g grant) Name() string               { return string(g) }
func (grant) Unlock(context.Context) error { return nil }
func (grant) Lost() <-chan struct{}        { return nil }

func (w *world) reconcileScenarios(t *testing.T) {
	c := w.c
	w.scenario(t, "ReconcilersAtOnce", "four reconcilers on one database at once (two data-plane replicas and two more whose lock excludes nobody) over 30 stale jobs: every job is failed exactly once (I3, I6)", func(t *testing.T) map[string]any {
		ctx := context.Background()
		st, err := entstore.Open(ctx, c.DSN)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		const n = 30
		var ids []string
		for i := range n {
			tpl := fmt.Sprintf("tpl-recon-%02d", i)
			status, phase := core.JobRunning, core.PhasePulling
			if i%3 == 1 {
				phase = core.PhaseBuildingExt4
			} else if i%3 == 2 {
				status, phase = core.JobPending, ""
			}
			j := &core.Job{JobID: fmt.Sprintf("recon-%s-%02d", strings.ToLower(c.DBName[len(c.DBName)-4:]), i), TemplateID: tpl, AttemptNo: 1,
				Operation: core.OpCreate, Status: status, Phase: phase, ActiveKey: core.ActiveKeyFromImage(tpl)}
			if err := st.Jobs().Create(ctx, j); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, j.JobID)
		}
		t.Cleanup(func() { c.DB.Exec("DELETE FROM t_cube_template_image_job WHERE template_id LIKE 'tpl-recon-%'") })
		// Stale for every tier at once.
		if _, err := c.DB.Exec("UPDATE t_cube_template_image_job SET updated_at = NOW() - INTERVAL 1 HOUR WHERE template_id LIKE 'tpl-recon-%'"); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		failedBy := map[string]int{}
		movedOn := 0
		var wg sync.WaitGroup
		for r := range 2 {
			rec := &data.Reconciler{Store: st, Locker: grantAll{}, Config: data.ReconcilerConfig{
				PendingStaleAfter: time.Minute, PullingStaleAfter: time.Minute, RunningStaleAfter: time.Minute, Logger: quiet()}}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 5 {
					rep, err := rec.RunOnce(ctx)
					if err != nil {
						t.Errorf("reconciler %d: %v", r, err)
						return
					}
					mu.Lock()
					for _, id := range rep.Failed {
						failedBy[id]++
					}
					movedOn += rep.MovedOn
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		time.Sleep(2 * time.Second) // let the replicas' own ticks (every second) run too
		inProcess := 0
		for _, id := range ids {
			inProcess += failedBy[id]
			// The replicas' reconcilers and liveness sweeps, and the
			// master's liveness sweep.
			byReplicas := 0
			for _, p := range append(append([]*harness.Proc(nil), c.TCs...), c.Masters...) {
				byReplicas += strings.Count(p.Log(), `"job_id":"`+id+`"`)
			}
			if total := failedBy[id] + byReplicas; total != 1 {
				t.Errorf("job %s failed %d times (%d by the racing reconcilers, %d by the replicas), want once", id, total, failedBy[id], byReplicas)
			}
			if s, _, _ := c.JobRow(id); s != "FAILED" {
				t.Errorf("job %s is %s", id, s)
			}
		}
		if k := c.Count("SELECT COUNT(*) FROM t_cube_template_image_job WHERE template_id LIKE 'tpl-recon-%' AND active_key IS NOT NULL"); k != 0 {
			t.Errorf("%d failed jobs still hold their active key", k)
		}
		c.DB.Exec("DELETE FROM t_cube_template_image_job WHERE template_id LIKE 'tpl-recon-%'")
		return map[string]any{"jobs": n, "failed_by_racing_reconcilers": inProcess, "failed_by_replicas": n - inProcess,
			"lost_races": movedOn}
	})
}
