package layers

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// ent is one tar entry of a fixture.
type ent struct {
	h    tar.Header
	body []byte
}

var fixedTime = time.Unix(1700000000, 0)

func reg(name, body string) ent {
	return ent{h: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body)), ModTime: fixedTime}, body: []byte(body)}
}

func dir(name string) ent {
	return ent{h: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: fixedTime}}
}

func sym(name, target string) ent {
	return ent{h: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, ModTime: fixedTime}}
}

func hard(name, target string) ent {
	return ent{h: tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target, Mode: 0o644, ModTime: fixedTime}}
}

func fifo(name string) ent {
	return ent{h: tar.Header{Typeflag: tar.TypeFifo, Name: name, Mode: 0o600, ModTime: fixedTime}}
}

func dev(name string, typ byte, major, minor int64) ent {
	return ent{h: tar.Header{Typeflag: typ, Name: name, Mode: 0o666, Devmajor: major, Devminor: minor, ModTime: fixedTime}}
}

// with returns e after f changed its header.
func (e ent) with(f func(h *tar.Header)) ent {
	f(&e.h)
	return e
}

func xattrs(kv ...string) func(h *tar.Header) {
	return func(h *tar.Header) {
		h.PAXRecords = map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			h.PAXRecords[paxXattr+kv[i]] = kv[i+1]
		}
		h.Format = tar.FormatPAX
	}
}

// mkTar writes entries as a tar stream.
func mkTar(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := e.h
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("fixture header %q: %v", h.Name, err)
		}
		if _, err := tw.Write(e.body); err != nil {
			t.Fatalf("fixture body %q: %v", h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func zst(t testing.TB, b []byte, opts ...zstd.EOption) []byte {
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

const (
	mtTar  = "application/vnd.oci.image.layer.v1.tar"
	mtGzip = "application/vnd.oci.image.layer.v1.tar+gzip"
	mtZstd = "application/vnd.oci.image.layer.v1.tar+zstd"
)

// blob is a layer's bytes before it is written to a file.
type blob struct {
	data      []byte
	mediaType string
}

func writeLayers(t testing.TB, blobs ...blob) []Layer {
	t.Helper()
	d := t.TempDir()
	var out []Layer
	for i, b := range blobs {
		p := filepath.Join(d, "layer"+string(rune('a'+i%26))+string(rune('a'+i/26)))
		if err := os.WriteFile(p, b.data, 0o600); err != nil {
			t.Fatal(err)
		}
		out = append(out, Layer{Path: p, MediaType: b.mediaType, Digest: "sha256:test" + string(rune('0'+i%10))})
	}
	return out
}

// plainLayers makes one uncompressed layer per entry list.
func plainLayers(t testing.TB, layers ...[]ent) []Layer {
	var bs []blob
	for _, l := range layers {
		bs = append(bs, blob{data: mkTar(t, l...), mediaType: mtTar})
	}
	return writeLayers(t, bs...)
}

func flatten(t testing.TB, layers []Layer, lim Limits) ([]byte, Stats, error) {
	t.Helper()
	var out bytes.Buffer
	st, err := Flatten(context.Background(), layers, &out, lim)
	return out.Bytes(), st, err
}

func mustFlatten(t testing.TB, layers ...[]ent) []byte {
	t.Helper()
	out, _, err := flatten(t, plainLayers(t, layers...), DefaultLimits())
	if err != nil {
		t.Fatalf("Flatten: %v", err)
	}
	return out
}

// got is one entry of a tree as tests compare it.
type got struct {
	h    *tar.Header
	body string
}

func readTar(t testing.TB, b []byte) []got {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	var out []got
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("reading output: %v", err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, got{h: h, body: string(body)})
	}
}

func find(es []got, name string) *got {
	for i := range es {
		if es[i].h.Name == name {
			return &es[i]
		}
	}
	return nil
}

// wantRule asserts err is a *RejectError with rule.
func wantRule(t testing.TB, err error, rule string) {
	t.Helper()
	var re *RejectError
	if !errors.As(err, &re) {
		t.Fatalf("want *RejectError %s, got %v", rule, err)
	}
	if re.Rule != rule {
		t.Fatalf("want rule %s, got %v", rule, err)
	}
	if !errors.Is(err, ErrRejected) {
		t.Fatalf("errors.Is(err, ErrRejected) false for %v", err)
	}
}

func isRoot() bool { return os.Geteuid() == 0 }

func needRoot(t testing.TB) {
	t.Helper()
	if !isRoot() {
		t.Skip("needs root: Extract applies ownership, devices and trusted.* xattrs")
	}
}

// rawHeader formats one ustar header block by hand, for archives that
// archive/tar refuses to write (PAX records it drops, hostile values).
func rawHeader(name string, typ byte, size int64) []byte {
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
	s := ""
	for ; n > 0; n /= 8 {
		s = string(rune('0'+n%8)) + s
	}
	for len(s) < width {
		s = "0" + s
	}
	return s
}

// pad rounds b up to a whole number of 512-byte blocks.
func pad(b []byte) []byte {
	if r := len(b) % 512; r != 0 {
		b = append(b, make([]byte, 512-r)...)
	}
	return b
}

// paxRecords encodes PAX records ("len key=value\n") in the given order.
func paxRecords(kv ...string) []byte {
	var out []byte
	for i := 0; i < len(kv); i += 2 {
		rec := " " + kv[i] + "=" + kv[i+1] + "\n"
		n := len(rec)
		for l := len(octalDec(n)) + n; ; l++ {
			if len(octalDec(l))+n == l {
				n = l
				break
			}
		}
		out = append(out, []byte(octalDec(n)+rec)...)
	}
	return out
}

func octalDec(n int) string { // decimal, despite the pun
	if n == 0 {
		return "0"
	}
	s := ""
	for ; n > 0; n /= 10 {
		s = string(rune('0'+n%10)) + s
	}
	return s
}

// rawPAXEntry is a PAX header with records followed by a header for name
// with the given data section.
func rawPAXEntry(name string, typ byte, data []byte, kv ...string) []byte {
	recs := paxRecords(kv...)
	var out []byte
	out = append(out, rawHeader("PaxHeaders.0/"+name[:min(len(name), 80)], tar.TypeXHeader, int64(len(recs)))...)
	out = append(out, pad(recs)...)
	out = append(out, rawHeader(name, typ, int64(len(data)))...)
	out = append(out, pad(data)...)
	return out
}

func endOfArchive() []byte { return make([]byte, 1024) }

// sparseBomb is a PAX 1.0 sparse file declaring 4 GiB + 2 bytes with one
// byte of data: 291 bytes once gzipped.
func sparseBomb() []byte {
	data := make([]byte, 513)
	copy(data, "1\n4294967297\n1\n")
	data[512] = 'X'
	out := rawPAXEntry("GNUSparseFile.0/bomb", tar.TypeReg, data,
		"GNU.sparse.major", "1", "GNU.sparse.minor", "0",
		"GNU.sparse.name", "bomb", "GNU.sparse.realsize", "4294967298")
	return append(out, endOfArchive()...)
}
