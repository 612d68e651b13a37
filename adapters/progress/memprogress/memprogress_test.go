package memprogress

import (
	"context"
	"testing"

	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/progresstest"
)

// harness shares one Sink: in-process progress is only visible to the
// process that holds it, so the "replicas" of a harness are one sink.
type harness struct{ s *Sink }

func (h harness) MakeSink(context.Context) (ports.ProgressSink, error) { return h.s, nil }
func (harness) Close()                                                 {}

func TestConformance(t *testing.T) {
	progresstest.RunConformanceTests(t, func(context.Context, *testing.T) (progresstest.Harness, error) {
		return harness{New()}, nil
	})
}
