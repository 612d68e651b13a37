package envdsourcetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Harness gives the suite an EnvdSource and control over the binary it
// reads.
type Harness interface {
	// MakeEnvdSource returns the source under test. It may be called
	// before any binary is installed.
	MakeEnvdSource(ctx context.Context) (ports.EnvdSource, error)
	// Install puts data in place as the binary, replacing any earlier one
	// (data may be empty).
	Install(ctx context.Context, data []byte) error
	// Remove takes the binary away.
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
	src ports.EnvdSource
}

// RunConformanceTests runs the suite against the source newHarness builds.
func RunConformanceTests(t *testing.T, newHarness HarnessMaker) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"ReturnsInstalledBytes", testReturnsBytes},
		{"ReplacedBinaryIsReadAgain", testReplaced},
		{"StatesOfTheBinary", testStates},
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
			src, err := h.MakeEnvdSource(ctx)
			if err != nil {
				t.Fatalf("MakeEnvdSource: %v", err)
			}
			tc.fn(t, &env{ctx: ctx, h: h, src: src})
		})
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return b
}

func (e *env) install(t *testing.T, data []byte) {
	t.Helper()
	if err := e.h.Install(e.ctx, data); err != nil {
		t.Fatalf("Install(%d bytes): %v", len(data), err)
	}
}

func (e *env) wantBytes(t *testing.T, want []byte) {
	t.Helper()
	got, err := e.src.Envd(e.ctx)
	if err != nil {
		t.Fatalf("Envd: %v, want %d bytes", err, len(want))
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Envd returned %d bytes that differ from the %d installed", len(got), len(want))
	}
}

// wantErr checks that Envd fails with an error wrapping want (and not the
// other sentinel, so callers can tell "absent" from "broken") and no bytes.
func (e *env) wantErr(t *testing.T, want error) {
	t.Helper()
	got, err := e.src.Envd(e.ctx)
	if !errors.Is(err, want) {
		t.Fatalf("Envd = %d bytes, %v; want an error wrapping %v", len(got), err, want)
	}
	for _, other := range []error{core.ErrNotFound, core.ErrInvalidArgument} {
		if other != want && errors.Is(err, other) {
			t.Fatalf("Envd error %v wraps both %v and %v", err, want, other)
		}
	}
	if len(got) != 0 {
		t.Fatalf("Envd returned %d bytes with its error %v", len(got), err)
	}
}

func testReturnsBytes(t *testing.T, e *env) {
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"one byte", []byte{0x7f}},
		{"ELF header", []byte("\x7fELF\x02\x01\x01\x00")},
		{"binary with NULs", append([]byte("\x00\x00\xff"), randomBytes(1000)...)},
		{"several MiB", randomBytes(3<<20 + 17)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.install(t, tc.data)
			e.wantBytes(t, tc.data)
			// Reading does not consume the binary.
			e.wantBytes(t, tc.data)
		})
	}
}

func testReplaced(t *testing.T, e *env) {
	v1 := append([]byte("\x7fELF v1 "), randomBytes(4096)...)
	v2 := append([]byte("\x7fELF v2, a different length "), randomBytes(100)...)
	e.install(t, v1)
	e.wantBytes(t, v1)
	// The same source, without being made again, sees the new binary.
	e.install(t, v2)
	e.wantBytes(t, v2)
	e.install(t, v1)
	e.wantBytes(t, v1)
}

// testStates walks one source through every state of the binary, in an
// order that would expose cached bytes or a cached error.
func testStates(t *testing.T, e *env) {
	good := append([]byte("\x7fELF "), randomBytes(512)...)
	steps := []struct {
		name    string
		do      func() error
		want    []byte // when wantErr is nil
		wantErr error
	}{
		{"never installed", func() error { return nil }, nil, core.ErrNotFound},
		{"installed", func() error { return e.h.Install(e.ctx, good) }, good, nil},
		{"emptied", func() error { return e.h.Install(e.ctx, nil) }, nil, core.ErrInvalidArgument},
		{"refilled", func() error { return e.h.Install(e.ctx, good) }, good, nil},
		{"removed", func() error { return e.h.Remove(e.ctx) }, nil, core.ErrNotFound},
		{"removed while empty", func() error {
			if err := e.h.Install(e.ctx, nil); err != nil {
				return err
			}
			e.wantErr(t, core.ErrInvalidArgument)
			return e.h.Remove(e.ctx)
		}, nil, core.ErrNotFound},
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
			e.wantBytes(t, s.want)
		})
	}
}
