package sealer_test

import (
	"context"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/sealer"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/sealertest"
)

type harness struct{ secret, other string }

func (h harness) MakeSealer(context.Context) (ports.Sealer, error) {
	return sealer.FromSecret(h.secret)
}
func (h harness) MakeOtherSealer(context.Context) (ports.Sealer, error) {
	return sealer.FromSecret(h.other)
}
func (harness) Close() {}

func TestConformance(t *testing.T) {
	sealertest.RunConformanceTests(t, func(context.Context, *testing.T) (sealertest.Harness, error) {
		return harness{secret: "callback-token-0123456789", other: "another-token-9876543210"}, nil
	})
}

func TestKeySizes(t *testing.T) {
	if _, err := sealer.New(make([]byte, 16)); err == nil {
		t.Fatal("a 16-byte key was accepted")
	}
	if _, err := sealer.FromSecret("short"); err == nil {
		t.Fatal("a short secret was accepted")
	}
}
