package bench

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/pgzip"

	"github.com/cubesandbox/templatecenter/adapters/layers"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/testkit/testimage"
)

// The benchmark image is made from files present on the machine, shaped
// like a language runtime image:
//
//	layer 0  base system: /etc, /usr/bin, /usr/sbin, /usr/lib
//	layer 1  a toolchain: this Go installation's GOROOT at usr/local/go
//	layer 2  a runtime and headers: /usr/lib/python3*, /usr/include, /usr/share
//	layer 3  filler made of the same real files under opt/vendor, only as
//	         much as the minimums below still need
//	layer 4  the application: whiteouts of a toolchain directory and of
//	         single files, an opaque directory refilled, a replaced file,
//	         and the templatecenter binary as the app
//
// Every layer is gzip (pgzip, default level), so decoding costs what it
// costs for images from Docker Hub.
const (
	MinImageBytes   = 700 << 20
	MinImageEntries = 25_000
	// imageFormat names the generator's rules; a cached image made by
	// other rules is rebuilt.
	imageFormat = "cube-bench-image/3"
)

// Layer is one generated layer blob.
type Layer struct {
	File    string `json:"file"`
	Digest  string `json:"digest"`  // sha256 of the gzip blob
	DiffID  string `json:"diff_id"` // sha256 of the tar
	Size    int64  `json:"size"`    // compressed bytes
	TarSize int64  `json:"tar_size"`
	Entries int    `json:"entries"`
	Content int64  `json:"content_bytes"` // regular file bytes
	What    string `json:"what"`
}

// Image is the generated image: its layers and totals.
type Image struct {
	Format  string  `json:"format"`
	Layers  []Layer `json:"layers"`
	Entries int     `json:"entries"`       // entries of the flattened tree
	Content int64   `json:"content_bytes"` // regular file bytes of the flattened tree
	Dir     string  `json:"-"`
}

// source is a host directory copied into the image at dst.
type source struct{ dir, dst string }

// layerBudget caps each machine-made layer, so that no single machine's
// odd directory dominates.
var layerBudget = []int64{330 << 20, 300 << 20, 260 << 20}

// MakeImage writes the image's layers into dir, or reuses them when dir
// already holds an image made by the same rules. app is a file to ship
// as the application (the templatecenter binary).
func MakeImage(dir, app string, logf func(string, ...any)) (*Image, error) {
	manifest := filepath.Join(dir, "image.json")
	if img, err := loadImage(manifest); err == nil {
		img.Dir = dir
		logf("reusing benchmark image in %s (%d layers, %d MB, ~%d entries)", dir, len(img.Layers), img.Content>>20, img.Entries)
		return img, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	start := time.Now()
	goroot := "/usr/local/go"
	if out, err := runOut("go", "env", "GOROOT"); err == nil && strings.TrimSpace(out) != "" {
		goroot = strings.TrimSpace(out)
	}
	pythons, _ := filepath.Glob("/usr/lib/python3*")
	sort.Strings(pythons)
	plan := [][]source{
		{{"/etc", "etc"}, {"/usr/bin", "usr/bin"}, {"/usr/sbin", "usr/sbin"}, {"/usr/lib", "usr/lib"}},
		{{goroot, "usr/local/go"}},
		append(sourcesOf(pythons, "usr/lib"), source{"/usr/include", "usr/include"}, source{"/usr/share", "usr/share"}),
	}
	img := &Image{Format: imageFormat, Dir: dir}
	var pool []poolFile // regular files seen, for the filler
	for i, srcs := range plan {
		l, files, err := writeLayer(filepath.Join(dir, fmt.Sprintf("layer%d.tar.gz", i)), func(w *layerWriter) error {
			for _, s := range srcs {
				if err := w.addTree(s.dir, s.dst, layerBudget[i]); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		l.What = describe(srcs)
		img.add(l)
		pool = append(pool, files...)
		logf("layer %d: %s: %d entries, %d MB, %d MB gzip", i, l.What, l.Entries, l.Content>>20, l.Size>>20)
	}
	// Whiteouts and the opaque directory of the app layer hide about this
	// much of layer 1.
	hidden := countUnder(filepath.Join(goroot, "test"))
	misc := countUnder(filepath.Join(goroot, "misc"))
	hidden.entries += misc.entries + 2
	hidden.bytes += misc.bytes
	if img.Content < MinImageBytes+hidden.bytes || img.Entries < MinImageEntries+hidden.entries {
		needBytes := MinImageBytes + hidden.bytes + 16<<20 - img.Content
		needEntries := MinImageEntries + hidden.entries + 500 - img.Entries
		l, _, err := writeLayer(filepath.Join(dir, "layer3.tar.gz"), func(w *layerWriter) error {
			return w.addFiller(pool, needBytes, needEntries)
		})
		if err != nil {
			return nil, err
		}
		l.What = "filler: real files again under opt/vendor"
		img.add(l)
		logf("layer 3: %s: %d entries, %d MB", l.What, l.Entries, l.Content>>20)
	}
	l, _, err := writeLayer(filepath.Join(dir, fmt.Sprintf("layer%d.tar.gz", len(img.Layers))), func(w *layerWriter) error {
		return w.addApp(goroot, app)
	})
	if err != nil {
		return nil, err
	}
	l.What = "app: whiteouts, an opaque directory, a replaced file, the app binary"
	img.add(l)
	logf("layer %d: %s: %d entries", len(img.Layers)-1, l.What, l.Entries)
	// The totals that count are those of the flattened tree.
	st, err := img.flatten()
	if err != nil {
		return nil, fmt.Errorf("flatten the benchmark image: %w", err)
	}
	img.Entries, img.Content = st.Entries, st.ContentBytes
	if img.Content < MinImageBytes || img.Entries < MinImageEntries {
		return nil, fmt.Errorf("benchmark image too small: %d bytes, %d entries (want %d, %d)", img.Content, img.Entries, MinImageBytes, MinImageEntries)
	}
	b, _ := json.MarshalIndent(img, "", "  ")
	if err := os.WriteFile(manifest, b, 0o644); err != nil {
		return nil, err
	}
	logf("benchmark image made in %.1fs: %d layers, %d MB content, ~%d entries", time.Since(start).Seconds(), len(img.Layers), img.Content>>20, img.Entries)
	return img, nil
}

// flatten applies the layers with the project's flattener and counts the
// result.
func (img *Image) flatten() (ports.TreeStats, error) {
	var ls []ports.FlattenLayer
	for _, l := range img.Layers {
		ls = append(ls, ports.FlattenLayer{Path: img.path(l), MediaType: string(types.OCILayer), Digest: l.Digest})
	}
	return layers.Flattener{}.Flatten(context.Background(), ls, func(ports.Tree) error { return nil })
}

// path is where layer l's blob is: under the image's directory, or
// where an absolute File says (the scale part's big image reuses the
// benchmark image's layers where they are).
func (img *Image) path(l Layer) string {
	if filepath.IsAbs(l.File) {
		return l.File
	}
	return filepath.Join(img.Dir, l.File)
}

func (img *Image) add(l Layer) {
	img.Layers = append(img.Layers, l)
	img.Entries += l.Entries
	img.Content += l.Content
}

func loadImage(manifest string) (*Image, error) {
	b, err := os.ReadFile(manifest)
	if err != nil {
		return nil, err
	}
	var img Image
	if err := json.Unmarshal(b, &img); err != nil {
		return nil, err
	}
	if img.Format != imageFormat || img.Content < MinImageBytes || img.Entries < MinImageEntries {
		return nil, fmt.Errorf("stale benchmark image")
	}
	for _, l := range img.Layers {
		st, err := os.Stat(filepath.Join(filepath.Dir(manifest), l.File))
		if err != nil || st.Size() != l.Size {
			return nil, fmt.Errorf("layer %s missing", l.File)
		}
	}
	return &img, nil
}

func sourcesOf(dirs []string, under string) []source {
	var out []source
	for _, d := range dirs {
		out = append(out, source{d, path.Join(under, filepath.Base(d))})
	}
	return out
}

func describe(srcs []source) string {
	var names []string
	for _, s := range srcs {
		names = append(names, s.dir)
	}
	return strings.Join(names, " ")
}

type count struct {
	entries int
	bytes   int64
}

func countUnder(dir string) count {
	var c count
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		c.entries++
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				c.bytes += info.Size()
			}
		}
		return nil
	})
	return c
}

// poolFile is a regular file a layer took, for the filler.
type poolFile struct {
	host string
	size int64
}

// layerWriter writes one layer: a PAX tar, gzip-compressed with pgzip,
// hashing both.
type layerWriter struct {
	tw      *tar.Writer
	dirs    map[string]bool
	links   map[[2]uint64]string // (dev, inode) -> first name, for hard links
	entries int
	content int64
	files   []poolFile
	mtime   time.Time
	// rewrite, when above 0, is how many more regular files of at least
	// 16 KiB addTree writes changed (the chunks part's lower-layer update).
	rewrite int
}

func writeLayer(file string, fill func(*layerWriter) error) (Layer, []poolFile, error) {
	f, err := os.Create(file)
	if err != nil {
		return Layer{}, nil, err
	}
	defer f.Close()
	blobHash, tarHash := sha256.New(), sha256.New()
	counted := &countingWriter{w: io.MultiWriter(f, blobHash)}
	zw, err := pgzip.NewWriterLevel(counted, pgzip.DefaultCompression)
	if err != nil {
		return Layer{}, nil, err
	}
	if err := zw.SetConcurrency(1<<20, 2*runtime.GOMAXPROCS(0)); err != nil {
		return Layer{}, nil, err
	}
	tarCount := &countingWriter{w: io.MultiWriter(zw, tarHash)}
	w := &layerWriter{tw: tar.NewWriter(tarCount), dirs: map[string]bool{}, links: map[[2]uint64]string{},
		mtime: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	if err := fill(w); err != nil {
		return Layer{}, nil, err
	}
	if err := w.tw.Close(); err != nil {
		return Layer{}, nil, err
	}
	if err := zw.Close(); err != nil {
		return Layer{}, nil, err
	}
	if err := f.Close(); err != nil {
		return Layer{}, nil, err
	}
	return Layer{
		File: filepath.Base(file), Digest: "sha256:" + hexOf(blobHash), DiffID: "sha256:" + hexOf(tarHash),
		Size: counted.n, TarSize: tarCount.n, Entries: w.entries, Content: w.content,
	}, w.files, nil
}

func hexOf(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// parents emits directory entries for the parents of name not yet written.
func (w *layerWriter) parents(name string) error {
	var missing []string
	for d := path.Dir(name); d != "." && !w.dirs[d]; d = path.Dir(d) {
		missing = append(missing, d)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := w.header(&tar.Header{Typeflag: tar.TypeDir, Name: missing[i] + "/", Mode: 0o755, ModTime: w.mtime}); err != nil {
			return err
		}
	}
	return nil
}

func (w *layerWriter) header(h *tar.Header) error {
	h.Format = tar.FormatPAX
	h.Uname, h.Gname = "", ""
	if h.Typeflag == tar.TypeDir {
		w.dirs[strings.TrimSuffix(h.Name, "/")] = true
	}
	w.entries++
	return w.tw.WriteHeader(h)
}

// addFile adds a regular file of size bytes (and its missing parents),
// its content made by fill one piece of buf at a time.
func (w *layerWriter) addFile(name string, mode, size int64, buf []byte, fill func([]byte)) error {
	if err := w.parents(name); err != nil {
		return err
	}
	if err := w.header(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: size, ModTime: w.mtime}); err != nil {
		return err
	}
	for left := size; left > 0; {
		b := buf[:min(left, int64(len(buf)))]
		fill(b)
		if _, err := w.tw.Write(b); err != nil {
			return err
		}
		left -= int64(len(b))
	}
	w.content += size
	return nil
}

// addTree copies dir (regular files, directories, symlinks, hard links)
// to dst, in sorted order, until the layer holds budget bytes of content.
func (w *layerWriter) addTree(dir, dst string, budget int64) error {
	if _, err := os.Stat(dir); err != nil {
		return nil // not on this machine
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if w.content >= budget {
			return fs.SkipAll
		}
		rel, _ := filepath.Rel(dir, p)
		name := path.Join(dst, filepath.ToSlash(rel))
		info, err := os.Lstat(p)
		if err != nil {
			return nil
		}
		h := &tar.Header{Name: name, Mode: int64(info.Mode().Perm()), ModTime: info.ModTime().Truncate(time.Second)}
		if info.Mode()&fs.ModeSetuid != 0 {
			h.Mode |= 0o4000
		}
		if info.Mode()&fs.ModeSetgid != 0 {
			h.Mode |= 0o2000
		}
		if info.Mode()&fs.ModeSticky != 0 {
			h.Mode |= 0o1000
		}
		st, _ := info.Sys().(*syscall.Stat_t)
		if st != nil {
			h.Uid, h.Gid = int(st.Uid), int(st.Gid)
		}
		if err := w.parents(name); err != nil {
			return err
		}
		switch {
		case info.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, name+"/"
			if w.dirs[name] {
				return nil
			}
			return w.header(h)
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return nil
			}
			h.Typeflag, h.Linkname = tar.TypeSymlink, target
			return w.header(h)
		case info.Mode().IsRegular():
			in, err := os.Open(p)
			if err != nil {
				return nil // unreadable here: leave it out
			}
			defer in.Close()
			if st != nil && st.Nlink > 1 {
				key := [2]uint64{uint64(st.Dev), st.Ino}
				if first, ok := w.links[key]; ok {
					h.Typeflag, h.Linkname = tar.TypeLink, first
					return w.header(h)
				}
				w.links[key] = name
			}
			h.Typeflag, h.Size = tar.TypeReg, info.Size()
			var src io.Reader = in
			if w.rewrite > 0 && info.Size() >= 16<<10 {
				w.rewrite--
				src, h.Size = rewritten(in, info.Size())
				if err := w.header(h); err != nil {
					return err
				}
				_, err := io.Copy(w.tw, src)
				w.content += h.Size
				return err
			}
			if err := w.header(h); err != nil {
				return err
			}
			n, err := io.Copy(w.tw, io.LimitReader(src, info.Size()))
			if err == nil && n < info.Size() {
				_, err = io.CopyN(w.tw, zeroReader{}, info.Size()-n) // the file shrank while read
			}
			w.content += info.Size()
			if info.Size() > 0 {
				w.files = append(w.files, poolFile{host: p, size: info.Size()})
			}
			return err
		}
		return nil // devices, sockets, FIFOs of the host stay out
	})
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// addFiller copies files of the pool again, under opt/vendor, until bytes
// and entries are reached.
func (w *layerWriter) addFiller(pool []poolFile, bytes int64, entries int) error {
	if len(pool) == 0 {
		return fmt.Errorf("no files on this machine to make the benchmark image from")
	}
	for i := 0; w.content < bytes || w.entries < entries; i++ {
		pf := pool[(i*7919)%len(pool)]
		name := fmt.Sprintf("opt/vendor/pkg%03d/%05d-%s", i/200, i, filepath.Base(pf.host))
		if err := w.parents(name); err != nil {
			return err
		}
		in, err := os.Open(pf.host)
		if err != nil {
			continue
		}
		err = w.header(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: pf.size, ModTime: w.mtime})
		if err == nil {
			var n int64
			n, err = io.Copy(w.tw, io.LimitReader(in, pf.size))
			if err == nil && n < pf.size {
				_, err = io.CopyN(w.tw, zeroReader{}, pf.size-n)
			}
		}
		in.Close()
		if err != nil {
			return err
		}
		w.content += pf.size
	}
	return nil
}

// addApp writes the application layer.
func (w *layerWriter) addApp(goroot, app string) error {
	add := func(h *tar.Header, body []byte) error {
		if err := w.parents(h.Name); err != nil {
			return err
		}
		h.ModTime = w.mtime
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if err := w.header(h); err != nil {
			return err
		}
		_, err := w.tw.Write(body)
		w.content += int64(len(body))
		return err
	}
	// A whole toolchain directory goes, and single files with it.
	for _, wh := range []string{"usr/local/go/.wh.test", "usr/local/go/.wh.CONTRIBUTING.md", "etc/.wh.motd"} {
		if err := add(&tar.Header{Typeflag: tar.TypeReg, Name: wh, Mode: 0o644}, nil); err != nil {
			return err
		}
	}
	// An opaque directory: misc/ keeps only what this layer puts there.
	if err := add(&tar.Header{Typeflag: tar.TypeDir, Name: "usr/local/go/misc/", Mode: 0o755}, nil); err != nil {
		return err
	}
	if err := add(&tar.Header{Typeflag: tar.TypeReg, Name: "usr/local/go/misc/.wh..wh..opq", Mode: 0o644}, nil); err != nil {
		return err
	}
	if err := add(&tar.Header{Typeflag: tar.TypeReg, Name: "usr/local/go/misc/README", Mode: 0o644}, []byte("replaced by the app layer\n")); err != nil {
		return err
	}
	if err := add(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/os-release", Mode: 0o644}, []byte("ID=cube-bench\nVERSION_ID=1\n")); err != nil {
		return err
	}
	body, err := os.ReadFile(app)
	if err != nil {
		return fmt.Errorf("app binary: %w", err)
	}
	if err := add(&tar.Header{Typeflag: tar.TypeReg, Name: "app/bin/server", Mode: 0o755, PAXRecords: map[string]string{
		"SCHILY.xattr.security.capability": "\x01\x00\x00\x02\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
	}}, body); err != nil {
		return err
	}
	return add(&tar.Header{Typeflag: tar.TypeSymlink, Name: "usr/local/bin/server", Linkname: "/app/bin/server"}, nil)
}

// fileLayer is a generated layer as go-containerregistry sees it: digest
// and diff_id are known, so pushing never re-reads or decompresses it.
type fileLayer struct {
	path string
	l    Layer
}

func (f fileLayer) Digest() (v1.Hash, error)           { return v1.NewHash(f.l.Digest) }
func (f fileLayer) DiffID() (v1.Hash, error)           { return v1.NewHash(f.l.DiffID) }
func (f fileLayer) Compressed() (io.ReadCloser, error) { return os.Open(f.path) }
func (f fileLayer) Size() (int64, error)               { return f.l.Size, nil }
func (f fileLayer) MediaType() (types.MediaType, error) {
	return types.OCILayer, nil
}

// Push pushes the image to ref and returns its manifest digest.
func (img *Image) Push(ref string) (string, error) {
	var ls []v1.Layer
	for _, l := range img.Layers {
		layer, err := partial.CompressedToLayer(fileLayer{path: img.path(l), l: l})
		if err != nil {
			return "", err
		}
		ls = append(ls, layer)
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	i, err := mutate.AppendLayers(base, ls...)
	if err != nil {
		return "", err
	}
	created := v1.Time{Time: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	cf, err := i.ConfigFile()
	if err != nil {
		return "", err
	}
	cf = cf.DeepCopy()
	cf.Created, cf.Architecture, cf.OS = created, runtime.GOARCH, "linux"
	cf.Config = v1.Config{Cmd: []string{"/app/bin/server"}, Env: []string{"PATH=/usr/local/go/bin:/usr/local/bin:/usr/bin:/bin"}}
	if i, err = mutate.ConfigFile(i, cf); err != nil {
		return "", err
	}
	return testimage.Push(ref, i)
}
