package memstore_test

import (
	"context"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/store/memstore"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/storetest"
)

// harness hands out fresh stores; there is nothing else to release.
type harness struct{}

func (harness) MakeStore(context.Context) (ports.Store, error) { return memstore.New(), nil }
func (harness) Close()                                         {}

func TestConformance(t *testing.T) {
	storetest.RunConformanceTests(t, func(context.Context, *testing.T) (storetest.Harness, error) {
		return harness{}, nil
	})
}
