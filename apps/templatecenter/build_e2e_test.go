package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cubesandbox/templatecenter/ports/buildertest"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
	"github.com/cubesandbox/templatecenter/testkit/testimage"
)

// richImage is a three-layer image holding every kind of entry the builders
// must carry over, including whiteouts, an opaque directory and a file
// replaced by a directory and back.
func richImage(t *testing.T) v1.Image {
	t.Helper()
	long := strings.Repeat("l", 200)
	l1 := []testimage.Entry{
		testimage.Dir("bin", 0o755), testimage.Dir("etc", 0o755), testimage.Dir("usr", 0o755), testimage.Dir("usr/bin", 0o755),
		testimage.Dir("var", 0o755), testimage.Dir("tmp", 0o1777), testimage.Dir("secret", 0o700), testimage.Dir("dev", 0o755),
		testimage.Dir("opaque", 0o755), testimage.Dir("home", 0o755), testimage.Dir("home/app", 0o750).Owned(1234, 5678),
		testimage.File("etc/hostname", 0o644, "cube\n"),
		testimage.File("etc/empty", 0o600, ""),
		testimage.File("usr/bin/tool", 0o4755, "#!/bin/sh\necho tool\n"),
		testimage.File("usr/bin/group-tool", 0o2755, "#!/bin/sh\n").Owned(0, 50),
		testimage.File("usr/bin/ping", 0o755, "ELF-ish").WithXattr("security.capability", "\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"),
		testimage.File("home/app/data.txt", 0o640, "app data\n").Owned(1234, 5678).WithXattr("user.origin", "layer1"),
		testimage.File("home/app/big.bin", 0o644, strings.Repeat("0123456789abcdef", 300_000)).Owned(1234, 5678),
		testimage.Hardlink("usr/bin/tool-link", "usr/bin/tool"),
		testimage.Symlink("bin/sh", "/usr/bin/tool"),
		testimage.Symlink("etc/rel-link", "../usr/bin/tool"),
		testimage.Symlink("etc/long-link", "/"+strings.Repeat("very/long/target/", 6)+"file"),
		testimage.Char("dev/null", 1, 3), testimage.Block("dev/loop9", 7, 9), testimage.FIFO("var/fifo"),
		testimage.File("secret/"+long, 0o400, "long name\n"),
		testimage.File("etc/naïve-名前.conf", 0o644, "non-ascii\n"),
		testimage.File("opaque/old-1", 0o644, "gone\n"), testimage.File("opaque/old-2", 0o644, "gone\n"),
		testimage.File("flip", 0o644, "file first\n"),
		testimage.File("etc/removed", 0o644, "removed later\n"),
		testimage.Dir("flop", 0o755), testimage.File("flop/inner", 0o644, "inner\n"),
	}
	l2 := []testimage.Entry{
		testimage.Whiteout("etc/removed"),
		testimage.Opaque("opaque"),
		testimage.File("opaque/new", 0o644, "new\n"),
		testimage.Whiteout("flip"), testimage.Dir("flip", 0o711), testimage.File("flip/child", 0o644, "now a dir\n"),
		testimage.Whiteout("flop"), testimage.File("flop", 0o600, "now a file\n"),
		testimage.File("etc/hostname", 0o644, "cube-2\n"),
	}
	l3 := []testimage.Entry{
		testimage.Whiteout("flip"), testimage.File("flip", 0o644, "file again\n"),
		testimage.Dir("nobody", 0o755).Owned(65534, 65534),
		testimage.File("nobody/file", 0o644, "nobody's\n").Owned(65534, 65534),
	}
	var ls []v1.Layer
	for i, es := range [][]testimage.Entry{l1, l2, l3} {
		l, err := testimage.Layer(es)
		if err != nil {
			t.Fatalf("layer %d: %v", i, err)
		}
		ls = append(ls, l)
	}
	img, err := testimage.Image(ls, v1.Config{Entrypoint: []string{"/bin/sh"}})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestBuildMatchesUmociUnpack pushes an image to the registry on loopback,
// builds it with the real binary and each builder, and compares every entry
// of the ext4 (read with debugfs) with what `umoci unpack` of the same
// image gives: ownership, modes, links, devices, xattrs, content.
func TestBuildMatchesUmociUnpack(t *testing.T) {
	testenv.Root(t, "umoci unpack and the mkfs builder need root")
	reg := testenv.Get(t, testenv.Registry)
	for _, tool := range []string{"skopeo", "umoci", "debugfs", "mkfs.ext4", "e2fsck"} {
		testenv.Tool(t, tool)
	}
	bin := buildBinaries(t)
	ref := fmt.Sprintf("%s/e2e/rich:%d", reg, time.Now().UnixNano())
	digest, err := testimage.Push(ref, richImage(t))
	if err != nil {
		t.Fatal(err)
	}

	work := t.TempDir()
	layout := filepath.Join(work, "oci")
	mustRun(t, "skopeo", "copy", "--src-tls-verify=false", "docker://"+ref, "oci:"+layout+":rich")
	bundle := filepath.Join(work, "bundle")
	mustRun(t, "umoci", "unpack", "--image", layout+":rich", bundle)
	want, err := buildertest.ReadDir(filepath.Join(bundle, "rootfs"))
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < 30 {
		t.Fatalf("umoci tree has only %d entries", len(want))
	}

	for _, builder := range []string{"mkfs", "ext4stream", "plugin:ext4stream"} {
		t.Run(builder, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "rootfs.ext4")
			rep := runBuildBin(t, bin, "--image", ref, "--insecure-registry", reg, "--builder", builder, "--out", out, "--json")
			if rep.ImageDigest != digest {
				t.Fatalf("image digest %s, pushed %s", rep.ImageDigest, digest)
			}
			got, err := buildertest.ReadImage(context.Background(), out)
			if err != nil {
				t.Fatal(err)
			}
			diff := buildertest.Diff(want, got, buildertest.DiffOptions{IgnoreRootMTime: true, AllowExtra: []string{"lost+found"}})
			if len(diff) > 0 {
				t.Fatalf("ext4 from %s differs from umoci unpack:\n%s", builder, strings.Join(diff, "\n"))
			}
			if err := buildertest.Fsck(context.Background(), out); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestBuildJSONAndReproducibility checks the one-shot command's contract:
// the JSON fields, byte-identical rebuilds, and a one-line reason with a
// non-zero exit on failure.
func TestBuildJSONAndReproducibility(t *testing.T) {
	reg := testenv.Get(t, testenv.Registry)
	bin := buildBinaries(t)
	ref := fmt.Sprintf("%s/e2e/json:%d", reg, time.Now().UnixNano())
	l, err := testimage.Layer([]testimage.Entry{testimage.Dir("etc", 0o755), testimage.File("etc/os-release", 0o644, "ID=cube\n")})
	if err != nil {
		t.Fatal(err)
	}
	img, err := testimage.Image([]v1.Layer{l}, v1.Config{})
	if err != nil {
		t.Fatal(err)
	}
	digest, err := testimage.Push(ref, img)
	if err != nil {
		t.Fatal(err)
	}
	// plugin:ext4stream builds from entries (API v3) and reports the
	// sha256 itself: the report must still be the file's.
	for _, builder := range []string{"ext4stream", "mkfs", "plugin:ext4stream"} {
		t.Run(builder, func(t *testing.T) {
			if builder == "mkfs" {
				testenv.Root(t, "the mkfs builder stages trees with their owners")
			}
			dir := t.TempDir()
			a := runBuildBin(t, bin, "--image", ref, "--insecure-registry", reg, "--builder", builder, "--out", filepath.Join(dir, "a.ext4"), "--json")
			b := runBuildBin(t, bin, "--image", ref, "--insecure-registry", reg, "--builder", builder, "--out", filepath.Join(dir, "b.ext4"), "--json")
			if a.ImageDigest != digest || len(a.Fingerprint) != 64 || a.ArtifactID != "rfs-"+a.Fingerprint[:24] || len(a.SHA256) != 64 || a.SizeBytes <= 0 {
				t.Fatalf("bad report %+v", a)
			}
			if a.SizeBytes%(2<<20) != 0 {
				t.Fatalf("size %d is not a multiple of 2 MiB", a.SizeBytes)
			}
			for _, ph := range []string{"pull", "flatten_and_build", "hash"} {
				if _, ok := a.PhasesMS[ph]; !ok {
					t.Fatalf("phases_ms lacks %s: %v", ph, a.PhasesMS)
				}
			}
			if a.SHA256 != b.SHA256 || a.Fingerprint != b.Fingerprint {
				t.Fatalf("two builds differ: %s vs %s", a.SHA256, b.SHA256)
			}
			if sum, err := buildertest.FileSHA256(filepath.Join(dir, "a.ext4")); err != nil || sum != a.SHA256 {
				t.Fatalf("file sha256 %s (%v), report says %s", sum, err, a.SHA256)
			}
		})
	}

	t.Run("failure", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "x.ext4")
		cmd := exec.Command(filepath.Join(bin, "templatecenter"), "build", "--image", reg+"/e2e/does-not-exist:v1",
			"--insecure-registry", reg, "--builder", "ext4stream", "--out", out, "--json")
		cmd.Env = buildEnv(t, bin)
		stdout, err := cmd.Output()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() == 0 {
			t.Fatalf("exit %v, want non-zero", err)
		}
		msg := strings.TrimSpace(string(ee.Stderr))
		if strings.Count(msg, "\n") != 0 || !strings.HasPrefix(msg, "templatecenter: ") {
			t.Fatalf("stderr is not one line with the reason: %q", msg)
		}
		if len(stdout) != 0 {
			t.Fatalf("stdout on failure: %q", stdout)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Fatal("output file left behind after a failed build")
		}
	})
}

var binDir string

// buildBinaries compiles templatecenter and the ext4stream plugin once.
func buildBinaries(t *testing.T) string {
	t.Helper()
	if binDir != "" {
		return binDir
	}
	dir, err := os.MkdirTemp("", "tc-e2e-bin-")
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range []string{"github.com/cubesandbox/templatecenter/apps/templatecenter", "github.com/cubesandbox/templatecenter/plugins/ext4stream"} {
		cmd := exec.Command("go", "build", "-o", dir+"/", pkg)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	binDir = dir
	return dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func buildEnv(t *testing.T, bin string) []string {
	work := t.TempDir()
	return append(os.Environ(),
		"CUBE_TEMPLATE_CENTER_PLUGIN_DIR="+bin,
		"CUBE_TEMPLATE_CENTER_ARTIFACT_WORK_DIR="+work,
		"CUBE_TEMPLATE_CENTER_LAYER_CACHE_DIR="+filepath.Join(work, "cache"))
}

func runBuildBin(t *testing.T, bin string, args ...string) buildReport {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "templatecenter"), append([]string{"build"}, args...)...)
	cmd.Env = buildEnv(t, bin)
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("templatecenter build %v: %v\n%s", args, err, stderr)
	}
	var rep buildReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("--json output %q: %v", out, err)
	}
	return rep
}

func mustRun(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}
