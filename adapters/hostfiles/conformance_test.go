package hostfiles_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/hostfiles"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/cubecasourcetest"
	"github.com/cubesandbox/templatecenter/ports/envdsourcetest"
	"github.com/cubesandbox/templatecenter/ports/legacyartifactstest"
	"github.com/cubesandbox/templatecenter/ports/releasemanifeststest"
)

// envdHarness installs the binary as <dir>/envd.
type envdHarness struct{ dir string }

func (h envdHarness) MakeEnvdSource(context.Context) (ports.EnvdSource, error) {
	// Made before the binary exists: NewEnvdFile then says it is not
	// available, but the source it returns still reads the path.
	src, _ := hostfiles.NewEnvdFile(h.dir)
	return src, nil
}

func (h envdHarness) Install(_ context.Context, data []byte) error {
	// Replace the way an operator would: write beside, then rename.
	tmp := filepath.Join(h.dir, ".envd.new")
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(h.dir, "envd"))
}

func (h envdHarness) Remove(context.Context) error { return os.Remove(filepath.Join(h.dir, "envd")) }
func (h envdHarness) Close()                       {}

func TestEnvdFileConformance(t *testing.T) {
	envdsourcetest.RunConformanceTests(t, func(_ context.Context, t *testing.T) (envdsourcetest.Harness, error) {
		return envdHarness{dir: t.TempDir()}, nil
	})
}

// caHarness keeps the CA at one path, replaced by rename as an operator
// (or CubeEgress's rotation) would.
type caHarness struct{ path string }

func (h caHarness) MakeCubeCASource(context.Context) (ports.CubeCASource, error) {
	return hostfiles.CubeCAFile{Path: h.path}, nil
}

func (h caHarness) Install(_ context.Context, data []byte) error {
	tmp := h.path + ".new"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, h.path)
}

func (h caHarness) Remove(context.Context) error { return os.Remove(h.path) }
func (h caHarness) Close()                       {}

func TestCubeCAFileConformance(t *testing.T) {
	cubecasourcetest.RunConformanceTests(t, func(_ context.Context, t *testing.T) (cubecasourcetest.Harness, error) {
		return caHarness{path: filepath.Join(t.TempDir(), "cube-root-ca.crt")}, nil
	})
}

// manifestHarness keeps the manifest at one path.
type manifestHarness struct{ path string }

func (h manifestHarness) MakeManifests(context.Context) (ports.ReleaseManifests, error) {
	return hostfiles.ManifestFile{Path: h.path}, nil
}

func (h manifestHarness) Install(_ context.Context, content []byte) error {
	if err := os.RemoveAll(h.path); err != nil {
		return err
	}
	return os.WriteFile(h.path, content, 0o644)
}

func (h manifestHarness) InstallUnreadable(context.Context) error {
	if err := os.RemoveAll(h.path); err != nil {
		return err
	}
	return os.Mkdir(h.path, 0o755)
}

func (h manifestHarness) Remove(context.Context) error { return os.RemoveAll(h.path) }
func (h manifestHarness) Close()                       {}

func TestManifestFileConformance(t *testing.T) {
	releasemanifeststest.RunConformanceTests(t, func(_ context.Context, t *testing.T) (releasemanifeststest.Harness, error) {
		return manifestHarness{path: filepath.Join(t.TempDir(), "release-manifest.json")}, nil
	})
}

// legacyHarness configures roots and writes files into the last one.
// Outside files go to a directory whose name starts with that root's, so a
// check by string prefix would take them for inside.
type legacyHarness struct {
	roots   []string
	outside string
}

func newLegacyHarness(t *testing.T, nroots int) *legacyHarness {
	base := t.TempDir()
	h := &legacyHarness{}
	for i := range nroots {
		r := filepath.Join(base, "artifacts"+string(rune('a'+i)))
		if err := os.Mkdir(r, 0o755); err != nil {
			t.Fatal(err)
		}
		h.roots = append(h.roots, r)
	}
	h.outside = h.roots[len(h.roots)-1] + "-outside"
	return h
}

func (h *legacyHarness) MakeLegacyArtifacts(context.Context) (ports.LegacyArtifacts, error) {
	return hostfiles.NewLegacyArtifacts(h.roots)
}

func write(dir, rel string, data []byte) (string, error) {
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", err
	}
	return p, os.WriteFile(p, data, 0o600)
}

func (h *legacyHarness) WriteInside(_ context.Context, rel string, data []byte) (string, error) {
	return write(h.roots[len(h.roots)-1], rel, data)
}

func (h *legacyHarness) WriteOutside(_ context.Context, rel string, data []byte) (string, error) {
	return write(h.outside, rel, data)
}

func (h *legacyHarness) LinkInside(_ context.Context, rel, target string) (string, error) {
	p := filepath.Join(h.roots[len(h.roots)-1], filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", err
	}
	return p, os.Symlink(target, p)
}

func (h *legacyHarness) ReadFile(_ context.Context, path string) ([]byte, bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	return b, err == nil, err
}

func (h *legacyHarness) Close() {}

func TestLegacyArtifactsConformance(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(string(rune('0'+n))+"roots", func(t *testing.T) {
			legacyartifactstest.RunConformanceTests(t, func(_ context.Context, t *testing.T) (legacyartifactstest.Harness, error) {
				return newLegacyHarness(t, n), nil
			})
		})
	}
}
