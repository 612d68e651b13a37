// Package devimage is the example image of cubemaster dev and the OCI
// registry that serves it on loopback, so the dev mode and `make demo`
// work offline. The image is generated from the files under rootfs/ in
// this directory (embedded in the binary) with fixed owners, modes and
// times: its digest, and the ext4 built from it, are the same on every
// machine and every run.
package devimage

import (
	"archive/tar"
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

//go:embed rootfs
var rootfs embed.FS

// Repository and Tag name the example image in the registry.
const (
	Repository = "cube/example"
	Tag        = "latest"
)

// created is the image's (and every file's) time.
var created = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// layers splits rootfs into two layers (a base and an app), so a pull
// shows more than one layer.
var layers = [][]string{{"etc"}, {"bin", "usr"}}

// Image builds the example image (linux/amd64, OCI media types).
func Image() (v1.Image, error) {
	var ls []v1.Layer
	for _, roots := range layers {
		b, err := layerTar(roots)
		if err != nil {
			return nil, err
		}
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
			tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
	}
	img, err := mutate.AppendLayers(empty.Image, ls...)
	if err != nil {
		return nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created = v1.Time{Time: created}
	cf.Config = v1.Config{Cmd: []string{"/bin/hello"}, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
		Labels: map[string]string{"org.opencontainers.image.title": "CubeTemplateCenter example"}}
	return mutate.ConfigFile(img, cf)
}

// layerTar writes the files under the given top-level directories of
// rootfs as a tar, in lexical order, owned by root.
func layerTar(roots []string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, root := range roots {
		err := fs.WalkDir(rootfs, path.Join("rootfs", root), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel := strings.TrimPrefix(p, "rootfs/")
			h := &tar.Header{Name: rel, ModTime: created, Format: tar.FormatPAX, Uname: "root", Gname: "root"}
			if d.IsDir() {
				h.Typeflag, h.Name, h.Mode = tar.TypeDir, rel+"/", 0o755
				return tw.WriteHeader(h)
			}
			body, err := rootfs.ReadFile(p)
			if err != nil {
				return err
			}
			h.Typeflag, h.Size, h.Mode = tar.TypeReg, int64(len(body)), 0o644
			if strings.HasPrefix(rel, "bin/") {
				h.Mode = 0o755
			}
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			_, err = tw.Write(body)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Registry is an in-memory OCI registry holding the example image.
type Registry struct {
	srv  *http.Server
	host string
	ref  string
}

// Serve starts a registry on ln (loopback) and pushes the example image
// to it.
func Serve(ctx context.Context, ln net.Listener) (*Registry, error) {
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r := &Registry{srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, host: ln.Addr().String()}
	go func() {
		if err := r.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Printf("example registry: %v", err)
		}
	}()
	img, err := Image()
	if err != nil {
		r.Close()
		return nil, err
	}
	r.ref = r.host + "/" + Repository + ":" + Tag
	ref, err := name.ParseReference(r.ref, name.Insecure)
	if err != nil {
		r.Close()
		return nil, err
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		r.Close()
		return nil, fmt.Errorf("push the example image to %s: %w", r.host, err)
	}
	return r, nil
}

// Host is the registry's host:port.
func (r *Registry) Host() string { return r.host }

// Ref is the example image's reference.
func (r *Registry) Ref() string { return r.ref }

// Close stops the registry.
func (r *Registry) Close() error { return r.srv.Close() }
