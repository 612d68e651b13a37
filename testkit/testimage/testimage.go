package testimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Entry is one tar entry of a layer. Body is the content of regular files.
type Entry struct {
	Header tar.Header
	Body   []byte
}

// Epoch is the mtime used for generated entries.
var Epoch = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)

// Dir, File, Symlink, Hardlink, Char, Block, FIFO and Whiteout make entries.
func Dir(name string, mode int64) Entry {
	return Entry{Header: tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: Epoch}}
}

// File makes a regular file.
func File(name string, mode int64, body string) Entry {
	return Entry{Header: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body)), ModTime: Epoch}, Body: []byte(body)}
}

// Symlink makes a symbolic link.
func Symlink(name, target string) Entry {
	return Entry{Header: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, ModTime: Epoch}}
}

// Hardlink makes a hard link to an earlier entry.
func Hardlink(name, target string) Entry {
	return Entry{Header: tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target, ModTime: Epoch}}
}

// Char makes a character device.
func Char(name string, major, minor int64) Entry {
	return Entry{Header: tar.Header{Typeflag: tar.TypeChar, Name: name, Mode: 0o666, Devmajor: major, Devminor: minor, ModTime: Epoch}}
}

// Block makes a block device.
func Block(name string, major, minor int64) Entry {
	return Entry{Header: tar.Header{Typeflag: tar.TypeBlock, Name: name, Mode: 0o660, Devmajor: major, Devminor: minor, ModTime: Epoch}}
}

// FIFO makes a named pipe.
func FIFO(name string) Entry {
	return Entry{Header: tar.Header{Typeflag: tar.TypeFifo, Name: name, Mode: 0o644, ModTime: Epoch}}
}

// Whiteout removes name from lower layers.
func Whiteout(name string) Entry {
	dir, base := filepath.Split(name)
	return File(dir+".wh."+base, 0o644, "")
}

// Opaque hides everything lower layers put in dir.
func Opaque(dir string) Entry { return File(strings.TrimSuffix(dir, "/")+"/.wh..wh..opq", 0o644, "") }

// Owned sets uid/gid; WithXattr adds a PAX xattr.
func (e Entry) Owned(uid, gid int) Entry { e.Header.Uid, e.Header.Gid = uid, gid; return e }

// WithXattr adds an extended attribute as a SCHILY.xattr PAX record.
func (e Entry) WithXattr(k, v string) Entry {
	if e.Header.PAXRecords == nil {
		e.Header.PAXRecords = map[string]string{}
	}
	e.Header.PAXRecords["SCHILY.xattr."+k] = v
	e.Header.Format = tar.FormatPAX
	return e
}

// LayerTar writes entries as an uncompressed tar.
func LayerTar(entries []Entry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.Header
		if len(h.PAXRecords) > 0 {
			h.Format = tar.FormatPAX
		}
		if err := tw.WriteHeader(&h); err != nil {
			return nil, fmt.Errorf("entry %s: %w", h.Name, err)
		}
		if len(e.Body) > 0 {
			if _, err := tw.Write(e.Body); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Layer turns entries into a gzip-compressed OCI layer.
func Layer(entries []Entry) (v1.Layer, error) {
	b, err := LayerTar(entries)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// DirLayer tars a host directory into file (under prefix inside the image)
// and returns it as a gzip layer. Ownership and modes are taken from the
// host; the walk is sorted so the layer is deterministic.
func DirLayer(src, prefix, file string) (v1.Layer, error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel == "." {
			return nil
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		if !info.Mode().IsRegular() && !info.IsDir() && info.Mode()&fs.ModeSymlink == 0 {
			return nil
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(filepath.Join(prefix, rel))
		if info.IsDir() {
			h.Name += "/"
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			h.Uid, h.Gid = int(st.Uid), int(st.Gid)
		}
		h.Uname, h.Gname = "", ""
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			in, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, in)
			in.Close()
			return err
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromFile(file, tarball.WithMediaType(types.OCILayer))
}

// Image assembles layers into an image for linux/amd64 with a config.
func Image(layers []v1.Layer, cfg v1.Config) (v1.Image, error) {
	img, err := mutate.AppendLayers(empty.Image, layers...)
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
	cf.Config = cfg
	cf.Created = v1.Time{Time: Epoch}
	return mutate.ConfigFile(img, cf)
}

// Push writes img to ref on a plain-HTTP registry and returns its manifest
// digest.
func Push(ref string, img v1.Image) (string, error) {
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return "", err
	}
	if err := remote.Write(r, img); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	d, err := img.Digest()
	return d.String(), err
}

// SortedNames returns map keys in order (for stable test output).
func SortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
