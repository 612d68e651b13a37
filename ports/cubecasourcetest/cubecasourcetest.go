package cubecasourcetest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/testkit/testca"
)

// Harness gives the suite a CubeCASource and control over the file it
// reads.
type Harness interface {
	// MakeCubeCASource returns the source under test. It may be called
	// before any CA is installed.
	MakeCubeCASource(ctx context.Context) (ports.CubeCASource, error)
	// Install puts data in place as the CA, replacing any earlier one.
	Install(ctx context.Context, data []byte) error
	// Remove takes the CA away.
	Remove(ctx context.Context) error
	// Close releases what the harness opened.
	Close()
}

// HarnessMaker returns a fresh Harness for one subtest.
type HarnessMaker func(ctx context.Context, t *testing.T) (Harness, error)

// testTimeout bounds each subtest, so a source that blocks fails instead of
// hanging the run.
const testTimeout = 30 * time.Second

type env struct {
	ctx context.Context
	h   Harness
	src ports.CubeCASource
}

// RunConformanceTests runs the suite against the source newHarness builds.
func RunConformanceTests(t *testing.T, newHarness HarnessMaker) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"ReturnsInstalledCA", testReturns},
		{"RotatedCAIsReadAgain", testRotated},
		{"RefusesWhatIsNotOneCertificate", testRefuses},
		{"StatesOfTheFile", testStates},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			h, err := newHarness(ctx, t)
			if err != nil {
				t.Fatalf("new harness: %v", err)
			}
			t.Cleanup(h.Close)
			src, err := h.MakeCubeCASource(ctx)
			if err != nil {
				t.Fatalf("MakeCubeCASource: %v", err)
			}
			tc.fn(t, &env{ctx: ctx, h: h, src: src})
		})
	}
}

func (e *env) install(t *testing.T, data []byte) {
	t.Helper()
	if err := e.h.Install(e.ctx, data); err != nil {
		t.Fatalf("Install(%d bytes): %v", len(data), err)
	}
}

func (e *env) wantCA(t *testing.T, want []byte) {
	t.Helper()
	got, err := e.src.CubeCA(e.ctx)
	if err != nil {
		t.Fatalf("CubeCA: %v, want the installed certificate", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("CubeCA returned %q, want the installed %q", got, want)
	}
}

// wantErr checks that CubeCA fails with an error wrapping want (and not the
// other sentinel, so callers can tell "absent" from "broken") and no bytes.
func (e *env) wantErr(t *testing.T, want error) {
	t.Helper()
	got, err := e.src.CubeCA(e.ctx)
	if !errors.Is(err, want) {
		t.Fatalf("CubeCA = %d bytes, %v; want an error wrapping %v", len(got), err, want)
	}
	for _, other := range []error{core.ErrNotFound, core.ErrInvalidArgument} {
		if other != want && errors.Is(err, other) {
			t.Fatalf("CubeCA error %v wraps both %v and %v", err, want, other)
		}
	}
	if len(got) != 0 {
		t.Fatalf("CubeCA returned %d bytes with its error %v", len(got), err)
	}
}

func testReturns(t *testing.T, e *env) {
	ca := testca.PEM(1)
	e.install(t, ca)
	e.wantCA(t, ca)
	e.wantCA(t, ca)
	// Text around the block and other line endings are the operator's.
	loose := append([]byte("# CubeEgress root\r\n"), bytes.ReplaceAll(ca, []byte("\n"), []byte("\r\n"))...)
	e.install(t, loose)
	e.wantCA(t, loose)
}

func testRotated(t *testing.T, e *env) {
	a, b := testca.PEM(1), testca.PEM(2)
	e.install(t, a)
	e.wantCA(t, a)
	e.install(t, b)
	e.wantCA(t, b)
}

func testRefuses(t *testing.T, e *env) {
	key := []byte("-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n")
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"not PEM", []byte("not a certificate\n")},
		{"a key", key},
		{"two certificates", append(testca.PEM(1), testca.PEM(2)...)},
		{"a certificate that does not parse", []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")},
		{"oversized", append(testca.PEM(1), bytes.Repeat([]byte("#"), core.MaxCubeCABytes)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.install(t, tc.data)
			e.wantErr(t, core.ErrInvalidArgument)
		})
	}
}

// testStates walks one source through every state of the file, in an
// order that would expose cached bytes or a cached error.
func testStates(t *testing.T, e *env) {
	good := testca.PEM(3)
	steps := []struct {
		name    string
		do      func() error
		want    []byte
		wantErr error
	}{
		{"never installed", func() error { return nil }, nil, core.ErrNotFound},
		{"installed", func() error { return e.h.Install(e.ctx, good) }, good, nil},
		{"broken", func() error { return e.h.Install(e.ctx, []byte("x")) }, nil, core.ErrInvalidArgument},
		{"repaired", func() error { return e.h.Install(e.ctx, good) }, good, nil},
		{"removed", func() error { return e.h.Remove(e.ctx) }, nil, core.ErrNotFound},
		{"installed again", func() error { return e.h.Install(e.ctx, good) }, good, nil},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: harness: %v", s.name, err)
		}
		t.Run(s.name, func(t *testing.T) {
			if s.wantErr != nil {
				e.wantErr(t, s.wantErr)
				return
			}
			e.wantCA(t, s.want)
		})
	}
}
