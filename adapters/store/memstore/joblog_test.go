package memstore_test

import (
	"context"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/store/memstore"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/joblogtest"
)

type jobLogHarness struct{ l *memstore.JobLog }

func (h jobLogHarness) MakeJobLog(context.Context) (ports.JobLog, error) { return h.l, nil }
func (jobLogHarness) Close()                                             {}

func TestJobLogConformance(t *testing.T) {
	joblogtest.RunConformanceTests(t, func(context.Context, *testing.T) (joblogtest.Harness, error) {
		return jobLogHarness{l: memstore.NewJobLog()}, nil
	})
}
