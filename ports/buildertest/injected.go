package buildertest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/pipeline"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/testkit/testca"
)

// testInjected builds images the way the data plane adds to them: the
// envd layer (pipeline.EnvdLayer) after the image's own layers, through
// the harness's flattener, then the CubeEgress root CA baked into the
// tree (pipeline.BakeCA), then the builder. debugfs reads the result:
// envd at upstream's path with upstream's mode, the CA appended to the
// image's bundle and dropped in its anchor directory, or, for an image
// without a trust store, a bundle seeded with it alone.
func testInjected(t *testing.T, fx *fixture, fl ports.TreeFlattener) {
	envd := append([]byte("\x7fELF\x02\x01\x01"), randomBytes(300<<10, 7)...)
	caPEM, other := testca.PEM(1), testca.PEM(9)
	ca, err := core.ParseCubeCA(caPEM)
	if err != nil {
		t.Fatal(err)
	}
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	const bundle = "etc/ssl/certs/ca-certificates.crt"
	const anchor = "usr/local/share/ca-certificates/" + pipeline.AnchorFileName

	tests := []struct {
		name   string
		layer  func(l *layerBuilder)
		want   map[string]string // path: content sha256
		absent []string
		seeded bool
	}{
		{"debian-like image", func(l *layerBuilder) {
			l.dir("etc", 0o755, 0, 0)
			l.dir("etc/ssl", 0o755, 0, 0)
			l.dir("etc/ssl/certs", 0o755, 0, 0)
			l.file(bundle, 0o644, 0, 0, other)
			l.dir("usr", 0o755, 0, 0)
			l.dir("usr/local", 0o755, 0, 0)
			l.dir("usr/local/bin", 0o755, 0, 0)
			l.file("usr/local/bin/envd", 0o700, 1000, 1000, []byte("the image's own envd"))
			l.dir("usr/local/share", 0o755, 0, 0)
			l.dir("usr/local/share/ca-certificates", 0o755, 0, 0)
		}, map[string]string{bundle: sum(append(append([]byte{}, other...), caPEM...)), anchor: sum(caPEM)}, nil, false},
		{"distroless image", func(l *layerBuilder) {
			l.dir("etc", 0o755, 0, 0)
			l.file("etc/passwd", 0o644, 0, 0, []byte("root:x:0:0:root:/root:/sbin/nologin\n"))
		}, map[string]string{bundle: sum(caPEM)}, []string{anchor}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tick := 0
			l := &layerBuilder{tick: &tick}
			tc.layer(l)
			base := filepath.Join(dir, "base-layer")
			if err := writeLayer(base, l.ops, layerMediaTypes[1]); err != nil {
				t.Fatal(err)
			}
			el, err := pipeline.EnvdLayer(envd, dir, FixtureTime)
			if err != nil {
				t.Fatal(err)
			}
			content, err := os.Create(filepath.Join(dir, "ca-content"))
			if err != nil {
				t.Fatal(err)
			}
			defer content.Close()
			img := filepath.Join(dir, "rootfs.ext4")
			var res pipeline.CAResult
			b := fx.newBuilder(t)
			layers := []ports.FlattenLayer{{Path: base, MediaType: layerMediaTypes[1], Digest: "base"}, el}
			if _, err := fl.Flatten(context.Background(), layers, func(tree ports.Tree) error {
				baked, r, err := pipeline.BakeCA(tree, ca, content, FixtureTime)
				if err != nil {
					return err
				}
				res = r
				br, err := b.Build(context.Background(), baseSpec(img), baked)
				if err != nil {
					return err
				}
				checkResultSize(t, img, br)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if !res.Baked || res.Seeded != tc.seeded || res.Fingerprint != ca.Fingerprint {
				t.Fatalf("bake result %+v", res)
			}
			if err := Fsck(context.Background(), img); err != nil {
				t.Fatalf("fsck: %v", err)
			}
			got, err := ReadImage(context.Background(), img)
			if err != nil {
				t.Fatal(err)
			}
			e := got["usr/local/bin/envd"]
			if e == nil || e.Type != TypeReg || e.Mode != pipeline.EnvdMode || e.UID != 0 || e.GID != 0 || e.SHA256 != sum(envd) {
				t.Fatalf("envd in the image: %+v", e)
			}
			for p, want := range tc.want {
				e := got[p]
				if e == nil || e.Type != TypeReg || e.SHA256 != want {
					t.Fatalf("%s in the image: %+v, want content %s", p, e, want)
				}
				if p != bundle || tc.seeded {
					if e.Mode != 0o644 || e.UID != 0 {
						t.Errorf("%s: mode %o uid %d, want a root-owned 0644 file", p, e.Mode, e.UID)
					}
				}
			}
			for _, p := range tc.absent {
				if got[p] != nil {
					t.Errorf("%s is in the image", p)
				}
			}
			if tc.seeded {
				for _, d := range []string{"etc/ssl", "etc/ssl/certs"} {
					if e := got[d]; e == nil || e.Type != TypeDir || e.Mode != 0o755 || e.UID != 0 {
						t.Errorf("%s in the image: %+v, want a root-owned 0755 directory", d, e)
					}
				}
			}
		})
	}
}
