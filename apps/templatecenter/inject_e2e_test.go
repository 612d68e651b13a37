package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/pipeline"
	"github.com/cubesandbox/templatecenter/ports/buildertest"
	"github.com/cubesandbox/templatecenter/testkit/testca"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
	"github.com/cubesandbox/templatecenter/testkit/testimage"
)

// TestBuildInjectsEnvdAndCA builds, with the real binary and every builder,
// an image with a trust store and a distroless one, with an envd binary
// and a CubeEgress root CA, and reads the ext4 with debugfs: envd at
// upstream's path with upstream's mode, owned by root; the CA appended to
// the image's bundle and dropped in its anchor directory, or, without a
// trust store, a bundle of its own; the report names the CA's fingerprint,
// and the artifact id changes with the CA (it is in the fingerprint).
func TestBuildInjectsEnvdAndCA(t *testing.T) {
	reg := testenv.Get(t, testenv.Registry)
	testenv.Tool(t, "debugfs")
	bin := buildBinaries(t)
	dir := t.TempDir()
	envd := append([]byte("\x7fELF\x02\x01\x01"), []byte(strings.Repeat("envd", 4096))...)
	caPEM, otherPEM := testca.PEM(3), testca.PEM(11)
	ca, err := core.ParseCubeCA(caPEM)
	if err != nil {
		t.Fatal(err)
	}
	envdFile, caFile, otherFile := filepath.Join(dir, "envd"), filepath.Join(dir, "ca.crt"), filepath.Join(dir, "other.crt")
	for f, b := range map[string][]byte{envdFile: envd, caFile: caPEM, otherFile: otherPEM} {
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	const bundle = "etc/ssl/certs/ca-certificates.crt"
	const anchor = "usr/local/share/ca-certificates/" + pipeline.AnchorFileName

	images := []struct {
		name    string
		entries []testimage.Entry
		want    map[string]string // path: content sha256
		absent  []string
	}{
		{"debian-like", []testimage.Entry{
			testimage.Dir("etc", 0o755), testimage.Dir("etc/ssl", 0o755), testimage.Dir("etc/ssl/certs", 0o755),
			testimage.File(bundle, 0o644, string(otherPEM)),
			testimage.Dir("usr", 0o755), testimage.Dir("usr/local", 0o755), testimage.Dir("usr/local/bin", 0o755),
			testimage.File("usr/local/bin/envd", 0o700, "the image's own envd").Owned(1000, 1000),
			testimage.Dir("usr/local/share", 0o755), testimage.Dir("usr/local/share/ca-certificates", 0o755),
		}, map[string]string{bundle: sum(append(append([]byte{}, otherPEM...), caPEM...)), anchor: sum(caPEM)}, nil},
		{"distroless", []testimage.Entry{
			testimage.Dir("etc", 0o755), testimage.File("etc/passwd", 0o644, "root:x:0:0:root:/root:/sbin/nologin\n"),
		}, map[string]string{bundle: sum(caPEM)}, []string{anchor}},
	}
	for _, im := range images {
		l, err := testimage.Layer(im.entries)
		if err != nil {
			t.Fatal(err)
		}
		img, err := testimage.Image([]v1.Layer{l}, v1.Config{Entrypoint: []string{"/usr/local/bin/envd"}})
		if err != nil {
			t.Fatal(err)
		}
		ref := fmt.Sprintf("%s/e2e/inject-%s:%d", reg, im.name, time.Now().UnixNano())
		if _, err := testimage.Push(ref, img); err != nil {
			t.Fatal(err)
		}
		for _, builder := range []string{"ext4stream", "mkfs", "plugin:ext4stream"} {
			t.Run(im.name+"/"+builder, func(t *testing.T) {
				if builder == "mkfs" {
					testenv.Root(t, "the mkfs builder stages trees with their owners")
				}
				out := filepath.Join(t.TempDir(), "rootfs.ext4")
				rep := runBuildBin(t, bin, "--image", ref, "--insecure-registry", reg, "--builder", builder, "--out", out, "--json",
					"--envd", envdFile, "--cube-ca", caFile)
				if !rep.CubeEgressCABaked || rep.CubeEgressCAFingerprint != ca.Fingerprint || rep.CubeEgressCATargetsWritten < 1 {
					t.Fatalf("report says the CA was not baked: %+v", rep)
				}
				got, err := buildertest.ReadImage(context.Background(), out)
				if err != nil {
					t.Fatal(err)
				}
				e := got[strings.TrimPrefix(pipeline.EnvdInImagePath, "/")]
				if e == nil || e.Type != buildertest.TypeReg || e.Mode != pipeline.EnvdMode || e.UID != 0 || e.GID != 0 || e.SHA256 != sum(envd) {
					t.Fatalf("envd at %s: %+v", pipeline.EnvdInImagePath, e)
				}
				for p, want := range im.want {
					if e := got[p]; e == nil || e.Type != buildertest.TypeReg || e.SHA256 != want || e.UID != 0 || e.Mode != 0o644 {
						t.Fatalf("%s: %+v, want a root-owned 0644 file with content %s", p, e, want)
					}
				}
				for _, p := range im.absent {
					if got[p] != nil {
						t.Errorf("%s is in the image", p)
					}
				}
				if err := buildertest.Fsck(context.Background(), out); err != nil {
					t.Fatal(err)
				}
				// The CA is in the fingerprint: without it, another artifact.
				plain := runBuildBin(t, bin, "--image", ref, "--insecure-registry", reg, "--builder", builder,
					"--out", filepath.Join(t.TempDir(), "plain.ext4"), "--json", "--envd", envdFile)
				if plain.CubeEgressCABaked || plain.ArtifactID == rep.ArtifactID {
					t.Fatalf("without the CA: baked %v, artifact %s (with it: %s)", plain.CubeEgressCABaked, plain.ArtifactID, rep.ArtifactID)
				}
			})
		}
	}
}
