package imagesourcetest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Media types the suite pushes. Docker's are spelled out: image-spec only
// names the OCI ones.
const (
	mtDockerManifest = "application/vnd.docker.distribution.manifest.v2+json"
	mtDockerList     = "application/vnd.docker.distribution.manifest.list.v2+json"
	mtDockerConfig   = "application/vnd.docker.container.image.v1+json"
	mtDockerGzip     = "application/vnd.docker.image.rootfs.diff.tar.gzip"
	mtDockerTar      = "application/vnd.docker.image.rootfs.diff.tar"
)

// created is the image creation time of every test image.
var created = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)

// layer is a layer blob with the facts a manifest and config need.
type layer struct {
	blob      []byte
	diffID    digest.Digest
	mediaType string
}

func (l layer) desc() ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: l.mediaType, Digest: digest.FromBytes(l.blob), Size: int64(len(l.blob))}
}

// makeLayer builds a tar holding one file of n random bytes (random, so
// every run pushes new blobs and gzip cannot shrink them), gzip-compressed
// or not, with OCI or Docker media types.
func makeLayer(t *testing.T, n int, compressed, docker bool) layer {
	t.Helper()
	data := make([]byte, n)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	hdr := &tar.Header{Name: "file-" + hex.EncodeToString(data[:min(n, 6)]), Mode: 0o644, Size: int64(n),
		Typeflag: tar.TypeReg, ModTime: created}
	if err := tw.WriteHeader(hdr); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	l := layer{diffID: digest.FromBytes(tb.Bytes())}
	switch {
	case !compressed:
		l.blob, l.mediaType = tb.Bytes(), ocispec.MediaTypeImageLayer
		if docker {
			l.mediaType = mtDockerTar
		}
	default:
		var zb bytes.Buffer
		zw := gzip.NewWriter(&zb)
		if _, err := zw.Write(tb.Bytes()); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		l.blob, l.mediaType = zb.Bytes(), ocispec.MediaTypeImageLayerGzip
		if docker {
			l.mediaType = mtDockerGzip
		}
	}
	return l
}

// image describes an image to push.
type image struct {
	layers            []layer
	os, arch, variant string // default linux/amd64
	docker            bool   // Docker schema 2 media types instead of OCI
	// mutateConfig and mutateManifest edit the documents before they are
	// serialised, to build broken images.
	mutateConfig   func(*ocispec.Image)
	mutateManifest func(*ocispec.Manifest)
}

// pushed is what push wrote.
type pushed struct {
	repo       string
	digest     digest.Digest
	size       int64
	mediaType  string
	config     ocispec.Image
	configDesc ocispec.Descriptor
	manifest   ocispec.Manifest
	layers     []layer
}

// push pushes img to repo, tagged with tag, or by digest only when tag is
// "" (as index children are).
func (e *env) push(t *testing.T, repo, tag string, img image) pushed {
	t.Helper()
	if img.os == "" {
		img.os, img.arch = "linux", "amd64"
	}
	cfg := ocispec.Image{
		Created:  &created,
		Platform: ocispec.Platform{OS: img.os, Architecture: img.arch, Variant: img.variant},
		RootFS:   ocispec.RootFS{Type: "layers"},
		Config:   ocispec.ImageConfig{Env: []string{"PATH=/usr/bin", "SUITE_RUN=" + e.run}, Cmd: []string{"/bin/true"}},
	}
	man := ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest}
	cfgType := ocispec.MediaTypeImageConfig
	if img.docker {
		man.MediaType, cfgType = mtDockerManifest, mtDockerConfig
	}
	pushedBlobs := map[digest.Digest]bool{}
	for _, l := range img.layers {
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, l.diffID)
		man.Layers = append(man.Layers, l.desc())
		if d := l.desc().Digest; !pushedBlobs[d] {
			pushedBlobs[d] = true
			e.pushBlob(t, repo, l.blob)
		}
	}
	if img.mutateConfig != nil {
		img.mutateConfig(&cfg)
	}
	cfgRaw := mustJSON(t, cfg)
	e.pushBlob(t, repo, cfgRaw)
	man.Config = ocispec.Descriptor{MediaType: cfgType, Digest: digest.FromBytes(cfgRaw), Size: int64(len(cfgRaw))}
	if img.mutateManifest != nil {
		img.mutateManifest(&man)
	}
	raw := mustJSON(t, man)
	d := digest.FromBytes(raw)
	ref := tag
	if ref == "" {
		ref = d.String()
	}
	if err := e.h.PushManifest(e.ctx, repo, ref, man.MediaType, raw); err != nil {
		t.Fatalf("PushManifest(%s:%s): %v", repo, ref, err)
	}
	return pushed{repo: repo, digest: d, size: int64(len(raw)), mediaType: man.MediaType,
		config: cfg, configDesc: man.Config, manifest: man, layers: img.layers}
}

func (e *env) pushBlob(t *testing.T, repo string, b []byte) {
	t.Helper()
	if err := e.h.PushBlob(e.ctx, repo, b); err != nil {
		t.Fatalf("PushBlob(%s, %d bytes): %v", repo, len(b), err)
	}
}

// indexEntry is one child of an index.
type indexEntry struct {
	platform string // os/arch[/variant]
	image    pushed
}

// pushIndex pushes an index (a Docker manifest list when docker is set)
// over already pushed manifests, tagged with tag.
func (e *env) pushIndex(t *testing.T, repo, tag string, docker bool, children []indexEntry) digest.Digest {
	t.Helper()
	idx := ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex}
	if docker {
		idx.MediaType = mtDockerList
	}
	for _, c := range children {
		parts := strings.Split(c.platform, "/")
		p := &ocispec.Platform{OS: parts[0], Architecture: parts[1]}
		if len(parts) > 2 {
			p.Variant = parts[2]
		}
		idx.Manifests = append(idx.Manifests, ocispec.Descriptor{MediaType: c.image.mediaType, Digest: c.image.digest,
			Size: c.image.size, Platform: p})
	}
	raw := mustJSON(t, idx)
	if err := e.h.PushManifest(e.ctx, repo, tag, idx.MediaType, raw); err != nil {
		t.Fatalf("PushManifest(index %s:%s): %v", repo, tag, err)
	}
	return digest.FromBytes(raw)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
