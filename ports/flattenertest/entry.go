package flattenertest

import (
	"archive/tar"
	"bytes"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Entry is one tar entry of a fixture layer or tree.
type Entry struct {
	Header tar.Header
	Body   []byte
}

// FixedTime is the mtime of every entry the constructors make.
var FixedTime = time.Unix(1700000000, 0)

// Reg makes a regular file.
func Reg(name, body string) Entry {
	return Entry{Header: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body)), ModTime: FixedTime}, Body: []byte(body)}
}

// Dir makes a directory.
func Dir(name string) Entry {
	return Entry{Header: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: FixedTime}}
}

// Sym makes a symbolic link.
func Sym(name, target string) Entry {
	return Entry{Header: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, ModTime: FixedTime}}
}

// Hard makes a hard link.
func Hard(name, target string) Entry {
	return Entry{Header: tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target, Mode: 0o644, ModTime: FixedTime}}
}

// Fifo makes a named pipe.
func Fifo(name string) Entry {
	return Entry{Header: tar.Header{Typeflag: tar.TypeFifo, Name: name, Mode: 0o600, ModTime: FixedTime}}
}

// Dev makes a character (tar.TypeChar) or block (tar.TypeBlock) device.
func Dev(name string, typ byte, major, minor int64) Entry {
	return Entry{Header: tar.Header{Typeflag: typ, Name: name, Mode: 0o666, Devmajor: major, Devminor: minor, ModTime: FixedTime}}
}

// Whiteout hides name of the lower layers.
func Whiteout(dir, name string) Entry {
	if dir != "" {
		dir += "/"
	}
	return Reg(dir+".wh."+name, "")
}

// Opaque hides every lower child of dir ("" is the root).
func Opaque(dir string) Entry {
	if dir != "" {
		dir += "/"
	}
	return Reg(dir+".wh..wh..opq", "")
}

// With returns e after f changed its header.
func (e Entry) With(f func(h *tar.Header)) Entry {
	f(&e.Header)
	return e
}

// Xattrs sets SCHILY.xattr.* PAX records from name, value pairs.
func Xattrs(kv ...string) func(h *tar.Header) {
	return func(h *tar.Header) {
		h.PAXRecords = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.PAXRecords["SCHILY.xattr."+kv[i]] = kv[i+1]
		}
		h.Format = tar.FormatPAX
	}
}

// Tar writes entries as one uncompressed tar stream.
func Tar(t testing.TB, ents ...Entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := e.Header
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("fixture header %q: %v", h.Name, err)
		}
		if _, err := tw.Write(e.Body); err != nil {
			t.Fatalf("fixture body %q: %v", h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Gzip compresses b.
func Gzip(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Zstd compresses b.
func Zstd(t testing.TB, b []byte, opts ...zstd.EOption) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := zstd.NewWriter(&buf, opts...)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Layer media types.
const (
	MediaTar  = "application/vnd.oci.image.layer.v1.tar"
	MediaGzip = "application/vnd.oci.image.layer.v1.tar+gzip"
	MediaZstd = "application/vnd.oci.image.layer.v1.tar+zstd"
)

// Blob is a layer's bytes and declared media type ("" lets the flattener
// sniff it).
type Blob struct {
	Data      []byte
	MediaType string
}

// RawHeader formats one ustar header block by hand, for archives that
// archive/tar refuses to write.
func RawHeader(name string, typ byte, size int64) []byte {
	b := make([]byte, 512)
	copy(b[0:100], name)
	copy(b[100:108], "0000644\x00")
	copy(b[108:116], "0000000\x00")
	copy(b[116:124], "0000000\x00")
	copy(b[124:136], []byte(octal(size, 11)+"\x00"))
	copy(b[136:148], "14531234567\x00")
	b[156] = typ
	copy(b[257:263], "ustar\x00")
	copy(b[263:265], "00")
	for i := 148; i < 156; i++ {
		b[i] = ' '
	}
	sum := 0
	for _, c := range b {
		sum += int(c)
	}
	copy(b[148:156], []byte(octal(int64(sum), 6)+"\x00 "))
	return b
}

func octal(n int64, width int) string {
	s := strconv.FormatInt(n, 8)
	for len(s) < width {
		s = "0" + s
	}
	return s
}

// Pad rounds b up to a whole number of 512-byte blocks.
func Pad(b []byte) []byte {
	if r := len(b) % 512; r != 0 {
		b = append(b, make([]byte, 512-r)...)
	}
	return b
}

// PAXRecords encodes PAX records ("len key=value\n") in the given order.
func PAXRecords(kv ...string) []byte {
	var out []byte
	for i := 0; i+1 < len(kv); i += 2 {
		rec := " " + kv[i] + "=" + kv[i+1] + "\n"
		n := len(rec)
		for l := len(strconv.Itoa(n)) + n; ; l++ {
			if len(strconv.Itoa(l))+n == l {
				n = l
				break
			}
		}
		out = append(out, []byte(strconv.Itoa(n)+rec)...)
	}
	return out
}

// RawPAXEntry is a PAX header with records followed by a header for name
// with the given data section.
func RawPAXEntry(name string, typ byte, data []byte, kv ...string) []byte {
	recs := PAXRecords(kv...)
	var out []byte
	out = append(out, RawHeader("PaxHeaders.0/"+name[:min(len(name), 80)], tar.TypeXHeader, int64(len(recs)))...)
	out = append(out, Pad(recs)...)
	out = append(out, RawHeader(name, typ, int64(len(data)))...)
	out = append(out, Pad(data)...)
	return out
}

// EndOfArchive is the two zero blocks that end a tar.
func EndOfArchive() []byte { return make([]byte, 1024) }

// SparseFile is a PAX 1.0 sparse file of realSize bytes whose data regions
// are the given offset, content pairs (offsets ascending, regions apart).
func SparseFile(name string, realSize int64, regions ...any) []byte {
	var m, data []byte
	m = append(m, strconv.Itoa(len(regions)/2)+"\n"...)
	for i := 0; i+1 < len(regions); i += 2 {
		off, body := regions[i].(int64), regions[i+1].(string)
		m = append(m, strconv.FormatInt(off, 10)+"\n"+strconv.Itoa(len(body))+"\n"...)
		data = append(data, body...)
	}
	all := append(Pad(m), data...)
	return RawPAXEntry("GNUSparseFile.0/"+name, tar.TypeReg, all,
		"GNU.sparse.major", "1", "GNU.sparse.minor", "0",
		"GNU.sparse.name", name, "GNU.sparse.realsize", strconv.FormatInt(realSize, 10))
}

// Describe renders a flattened tree one line per entry, in stream order:
// "name type [-> link] [=body]" (type is the tar typeflag).
func Describe(t testing.TB, tree []byte) []string {
	t.Helper()
	var out []string
	for _, e := range ReadTar(t, tree) {
		s := e.Header.Name + " " + string(e.Header.Typeflag)
		if e.Header.Linkname != "" {
			s += " -> " + e.Header.Linkname
		}
		if e.Header.Typeflag == tar.TypeReg {
			s += " =" + string(e.Body)
		}
		out = append(out, s)
	}
	return out
}

// ReadTar reads every entry of a tar stream.
func ReadTar(t testing.TB, b []byte) []Entry {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	var out []Entry
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("reading tree: %v", err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, Entry{Header: *h, Body: body})
	}
}
