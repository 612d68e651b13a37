package entstore_test

import (
	"context"
	"testing"

	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/joblogtest"
)

// jobLogHarness gives every log a store of its own on one database: two
// replicas sharing it.
type jobLogHarness struct {
	*harness
	dsn string
}

func (h *jobLogHarness) MakeJobLog(ctx context.Context) (ports.JobLog, error) {
	s, err := openMigrated(ctx, h.dsn)
	if err != nil {
		return nil, err
	}
	h.onClose(s.Close)
	return s.JobLog(), nil
}

func TestJobLogConformance(t *testing.T) {
	for _, d := range dialects {
		t.Run(d, func(t *testing.T) {
			joblogtest.RunConformanceTests(t, func(ctx context.Context, t *testing.T) (joblogtest.Harness, error) {
				h := &harness{t: t, sv: serverFor(t, d)}
				dsn, drop, err := h.sv.create(ctx)
				if err != nil {
					return nil, err
				}
				h.onClose(drop)
				return &jobLogHarness{harness: h, dsn: dsn}, nil
			})
		})
	}
}
