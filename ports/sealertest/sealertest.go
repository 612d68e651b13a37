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
	// MakeRotatedSealer returns a Sealer that seals with a new key and
	// still opens what MakeSealer's Sealers sealed (their key, now an
	// older one).
	MakeRotatedSealer(ctx context.Context) (ports.Sealer, error)
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
		{"Rotation", testRotation},
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

// testRotation: after a key rotation, values sealed with the older key
// still open but are not current; values sealed now are, and the Sealer
// of the older key alone cannot open them.
func testRotation(t *testing.T, e *env) {
	old := e.sealer(t, false)
	before, err := old.Seal([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	if !old.Current(before) {
		t.Fatal("a value just sealed is not current")
	}
	rotated, err := e.h.MakeRotatedSealer(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := rotated.Open(before); err != nil || string(got) != secret {
		t.Fatalf("the rotated Sealer opens an older value: %q, %v", got, err)
	}
	if rotated.Current(before) {
		t.Fatal("a value sealed with the older key is current after the rotation")
	}
	after, err := rotated.Seal([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	if !rotated.Current(after) || old.Current(after) {
		t.Fatal("Current does not follow the key that sealed")
	}
	if _, err := old.Open(after); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("the older key alone opened a value sealed after the rotation: %v", err)
	}
	for _, v := range []string{"", "garbage", "v2.", "v1.abc"} {
		if rotated.Current(v) {
			t.Errorf("Current(%q) = true", v)
		}
	}
}
