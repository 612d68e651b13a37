package tcapp

import (
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/metrics"
	"github.com/cubesandbox/templatecenter/adapters/lock/memlock"
	"github.com/cubesandbox/templatecenter/adapters/store/memstore"
	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/core"
)

// A build the data plane's liveness judge fails (here: one its previous
// run left) is counted in jobs_finished_total, as a job failed anywhere
// else is.
func TestLivenessFailuresAreCounted(t *testing.T) {
	ctx := t.Context()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.DataPlane)
	if err != nil {
		t.Fatal(err)
	}
	st := memstore.New()
	job := &core.Job{JobID: "job-1", TemplateID: "tpl-1", AttemptNo: 1, Operation: core.OpCreate,
		Status: core.JobRunning, Phase: core.PhasePulling, BuildOwner: "tc-previous"}
	if err := st.Jobs().Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	cfg := config.DefaultsFor(config.Dirs{State: t.TempDir()})
	judge := livenessJudge(st, m, memlock.New(), cfg, "tc-now", slog.New(slog.NewTextHandler(io.Discard, nil)))
	failed, err := judge.FailRestarted(ctx, "tc-previous")
	if err != nil || len(failed) != 1 {
		t.Fatalf("FailRestarted: %v, %v; want job-1 failed", failed, err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var counted float64
	for _, f := range fams {
		if f.GetName() == "cube_template_jobs_finished_total" {
			for _, mt := range f.GetMetric() {
				counted += mt.GetCounter().GetValue()
			}
		}
	}
	if counted != 1 {
		t.Fatalf("jobs_finished_total counts %v jobs, want the failed build", counted)
	}
}
