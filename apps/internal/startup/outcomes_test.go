package startup

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/metrics"
	"github.com/cubesandbox/templatecenter/adapters/store/memstore"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// TestCountJobOutcomes: a job is counted once, when it becomes terminal,
// by operation and result; inside a transaction only once it commits.
func TestCountJobOutcomes(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.ControlPlane)
	if err != nil {
		t.Fatal(err)
	}
	st := CountJobOutcomes(memstore.New(), m)
	create := func(id string, op core.Operation) {
		t.Helper()
		if err := st.Jobs().Create(ctx, &core.Job{JobID: id, TemplateID: "tpl-" + id, AttemptNo: 1, Operation: op, Status: core.JobPending}); err != nil {
			t.Fatal(err)
		}
	}
	set := func(r ports.Repos, id string, status core.JobStatus, templateStatus string) error {
		_, err := r.Jobs().Update(ctx, id, func(j *core.Job) error {
			j.Status, j.TemplateStatus = status, templateStatus
			return nil
		})
		return err
	}
	create("a", core.OpCreate)
	create("b", core.OpRedo)
	create("c", core.OpCreate)
	create("d", core.OpCreate)
	if err := set(st, "a", core.JobRunning, ""); err != nil { // not terminal: not counted
		t.Fatal(err)
	}
	if err := set(st, "a", core.JobFailed, ""); err != nil {
		t.Fatal(err)
	}
	if err := set(st, "a", core.JobFailed, ""); err != nil { // already terminal: not again
		t.Fatal(err)
	}
	if err := set(st, "b", core.JobReady, string(core.TemplatePartiallyReady)); err != nil {
		t.Fatal(err)
	}
	if err := st.Tx(ctx, func(ctx context.Context, r ports.Repos) error {
		return set(r, "c", core.JobReady, string(core.TemplateReady))
	}); err != nil {
		t.Fatal(err)
	}
	rollback := errors.New("rolled back")
	if err := st.Tx(ctx, func(ctx context.Context, r ports.Repos) error {
		if err := set(r, "d", core.JobFailed, ""); err != nil {
			return err
		}
		return rollback
	}); !errors.Is(err, rollback) {
		t.Fatal(err)
	}
	got := map[string]float64{}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "cube_template_jobs_finished_total" {
			continue
		}
		for _, mt := range f.GetMetric() {
			var labels []string
			for _, l := range mt.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got[strings.Join(labels, ",")] = mt.GetCounter().GetValue()
		}
	}
	want := map[string]float64{"operation=CREATE,result=failed": 1, "operation=CREATE,result=ready": 1, "operation=REDO,result=partially_ready": 1}
	if !maps.Equal(got, want) {
		t.Fatalf("jobs_finished_total %v, want %v", got, want)
	}
}
