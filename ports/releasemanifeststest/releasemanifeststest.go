package releasemanifeststest

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Harness gives the suite a ReleaseManifests and control over the manifest
// it reads.
type Harness interface {
	// MakeManifests returns the implementation under test. It may be called
	// before any manifest is installed.
	MakeManifests(ctx context.Context) (ports.ReleaseManifests, error)
	// Install puts content in place as the manifest, replacing any earlier
	// one. content is the manifest's JSON as the bundle ships it, or a
	// broken variant of it.
	Install(ctx context.Context, content []byte) error
	// InstallUnreadable puts a manifest in place that exists but cannot be
	// read (for a file, a directory where the file belongs).
	InstallUnreadable(ctx context.Context) error
	// Remove takes the manifest away.
	Remove(ctx context.Context) error
	// Close releases what the harness opened.
	Close()
}

// HarnessMaker returns a fresh Harness for one subtest.
type HarnessMaker func(ctx context.Context, t *testing.T) (Harness, error)

// testTimeout bounds each subtest.
const testTimeout = 30 * time.Second

type env struct {
	ctx context.Context
	h   Harness
	m   ports.ReleaseManifests
}

// RunConformanceTests runs the suite against the implementation newHarness
// builds.
func RunConformanceTests(t *testing.T, newHarness HarnessMaker) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"AbsentIsNil", testAbsent},
		{"ValidIsParsed", testValid},
		{"BrokenIsAnError", testBroken},
		{"UnreadableIsAnError", testUnreadable},
		{"ReadAgainAfterChanges", testReadAgain},
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
			m, err := h.MakeManifests(ctx)
			if err != nil {
				t.Fatalf("MakeManifests: %v", err)
			}
			tc.fn(t, &env{ctx: ctx, h: h, m: m})
		})
	}
}

func (e *env) install(t *testing.T, content string) {
	t.Helper()
	if err := e.h.Install(e.ctx, []byte(content)); err != nil {
		t.Fatalf("Install: %v", err)
	}
}

func (e *env) wantAbsent(t *testing.T) {
	t.Helper()
	m, err := e.m.Manifest(e.ctx)
	if err != nil || m != nil {
		t.Fatalf("Manifest = %+v, %v; want nil, nil for no manifest", m, err)
	}
}

func (e *env) wantComponents(t *testing.T, want map[string]string) {
	t.Helper()
	m, err := e.m.Manifest(e.ctx)
	if err != nil {
		t.Fatalf("Manifest: %v", err)
	}
	if m == nil {
		t.Fatal("Manifest = nil for an installed manifest")
	}
	if !maps.Equal(m.Components, want) {
		t.Fatalf("components = %v, want %v", m.Components, want)
	}
}

func (e *env) wantError(t *testing.T) {
	t.Helper()
	m, err := e.m.Manifest(e.ctx)
	if err == nil {
		t.Fatalf("Manifest = %+v, nil; want an error for a broken manifest", m)
	}
	if m != nil {
		t.Fatalf("Manifest returned %+v with its error %v", m, err)
	}
}

func testAbsent(t *testing.T, e *env) {
	e.wantAbsent(t)
	// Asking again changes nothing.
	e.wantAbsent(t)
}

var full = map[string]string{
	core.ComponentGuestImage: "1.4.0",
	core.ComponentAgent:      "1.4.1",
	core.ComponentKernel:     "6.6.30",
	core.ComponentShim:       "2.1.0",
}

func testValid(t *testing.T, e *env) {
	for _, tc := range []struct {
		name    string
		content string
		want    map[string]string
	}{
		{"every component",
			`{"components": {"guest_image": "1.4.0", "agent": "1.4.1", "kernel": "6.6.30", "shim": "2.1.0"}}`, full},
		{"some components", `{"components": {"kernel": "6.6.30"}}`,
			map[string]string{core.ComponentKernel: "6.6.30"}},
		{"other top-level keys",
			"{\n  \"bundle\": \"one-click\", \"built_at\": 1767225600,\n" +
				`  "components": {"guest_image": "1.4.0", "agent": "1.4.1", "kernel": "6.6.30", "shim": "2.1.0"},` +
				"\n  \"notes\": [\"a\", {\"b\": null}]\n}\n", full},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.install(t, tc.content)
			e.wantComponents(t, tc.want)
		})
	}
}

func testBroken(t *testing.T, e *env) {
	for _, tc := range []struct{ name, content string }{
		{"empty file", ""},
		{"only whitespace", " \n\t\n"},
		{"not JSON", "components: {kernel: 6.6.30}\n"},
		{"truncated", `{"components": {"guest_image": "1.4.0", "kern`},
		{"trailing garbage", `{"components": {"kernel": "6.6.30"}} }`},
		{"components not an object", `{"components": "6.6.30"}`},
		{"version not a string", `{"components": {"kernel": 6}}`},
		{"array at the top", `[{"components": {"kernel": "6.6.30"}}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.install(t, tc.content)
			e.wantError(t)
		})
	}
}

func testUnreadable(t *testing.T, e *env) {
	if err := e.h.InstallUnreadable(e.ctx); err != nil {
		t.Fatalf("InstallUnreadable: %v", err)
	}
	e.wantError(t)
}

// testReadAgain: one implementation, the manifest changed under it, never a
// cached answer.
func testReadAgain(t *testing.T, e *env) {
	e.wantAbsent(t)
	e.install(t, `{"components": {"kernel": "6.6.30"}}`)
	e.wantComponents(t, map[string]string{core.ComponentKernel: "6.6.30"})
	e.install(t, `{"components": {"kernel": "6.6.31", "shim": "2.1.0"}}`)
	e.wantComponents(t, map[string]string{core.ComponentKernel: "6.6.31", core.ComponentShim: "2.1.0"})
	e.install(t, `{"components": {"kernel": `)
	e.wantError(t)
	e.install(t, `{"components": {"agent": "1.4.1"}}`)
	e.wantComponents(t, map[string]string{core.ComponentAgent: "1.4.1"})
	if err := e.h.Remove(e.ctx); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	e.wantAbsent(t)
}
