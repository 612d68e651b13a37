package sealertest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Harness makes Sealers for one subtest.
type Harness interface {
	// MakeSealer returns a Sealer; every call returns one with the same
	// key.
	MakeSealer(ctx context.Context) (ports.Sealer, error)
	// MakeOtherSealer returns a Sealer with a different key.
	MakeOtherSealer(ctx context.Context) (ports.Sealer, error)
	Close()
}

// HarnessMaker returns a fresh Harness for one subtest.
type HarnessMaker func(ctx context.Context, t *testing.T) (Harness, error)

type env struct {
	ctx context.Context
	h   Harness
}

func (e *env) sealer(t *testing.T, other bool) ports.Sealer {
	t.Helper()
	var s ports.Sealer
	var err error
	if other {
		s, err = e.h.MakeOtherSealer(e.ctx)
	} else {
		s, err = e.h.MakeSealer(e.ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// RunConformanceTests runs every check against the harness's sealers.
func RunConformanceTests(t *testing.T, newHarness HarnessMaker) {
	tests := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"RoundTrip", testRoundTrip},
		{"FreshValues", testFreshValues},
		{"SameKeyOpens", testSameKeyOpens},
		{"Refusals", testRefusals},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			h, err := newHarness(ctx, t)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			tc.fn(t, &env{ctx: ctx, h: h})
		})
	}
}

const secret = "user:bob password:s3cr3t-p@ss"

func testRoundTrip(t *testing.T, e *env) {
	s := e.sealer(t, false)
	for _, plain := range [][]byte{[]byte(secret), {}, bytes.Repeat([]byte{0, 0xff}, 4096)} {
		sealed, err := s.Seal(plain)
		if err != nil {
			t.Fatal(err)
		}
		if len(plain) > 0 && strings.Contains(sealed, string(plain)) {
			t.Fatal("the sealed value contains the plaintext")
		}
		got, err := s.Open(sealed)
		if err != nil || !bytes.Equal(got, plain) {
			t.Fatalf("Open = %q, %v", got, err)
		}
	}
}

func testFreshValues(t *testing.T, e *env) {
	s := e.sealer(t, false)
	a, err := s.Seal([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Seal([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Fatal("sealing the same plaintext twice gave the same value")
	}
}

func testSameKeyOpens(t *testing.T, e *env) {
	sealed, err := e.sealer(t, false).Seal([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.sealer(t, false).Open(sealed)
	if err != nil || string(got) != secret {
		t.Fatalf("another sealer with the same key: %q, %v", got, err)
	}
}

func testRefusals(t *testing.T, e *env) {
	s := e.sealer(t, false)
	sealed, err := s.Seal([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	flip := []byte(sealed)
	flip[len(flip)-3] ^= 1
	foreign, err := e.sealer(t, true).Seal([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{
		"altered":   string(flip),
		"truncated": sealed[:len(sealed)-4],
		"foreign":   foreign,
		"garbage":   "not sealed at all: " + secret,
		"empty":     "",
	} {
		got, err := s.Open(v)
		if err == nil || !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("%s: Open = %q, %v; want a refusal wrapping ErrInvalidArgument", name, got, err)
			continue
		}
		if strings.Contains(err.Error(), secret) || (len(v) > 8 && strings.Contains(err.Error(), v)) {
			t.Errorf("%s: the error quotes the value: %v", name, err)
		}
	}
}
