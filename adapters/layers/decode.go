package layers

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

type compression int

const (
	plain compression = iota
	gzipped
	zstded
	unknown
)

func (c compression) String() string {
	return [...]string{"uncompressed", "gzip", "zstd", "unknown"}[c]
}

// fromMediaType maps OCI and Docker layer media types; "" means "sniff".
// Foreign and non-distributable variants share the suffixes.
func fromMediaType(mt string) compression {
	switch {
	case mt == "":
		return unknown
	case strings.HasSuffix(mt, "+gzip"), strings.HasSuffix(mt, ".tar.gzip"):
		return gzipped
	case strings.HasSuffix(mt, "+zstd"), strings.HasSuffix(mt, ".tar.zstd"):
		return zstded
	case strings.HasSuffix(mt, ".tar"):
		return plain
	}
	return -1
}

// sniff looks at magic bytes: gzip, zstd (including skippable frames) or
// anything else, which the tar reader then judges.
func sniff(f *os.File) (compression, error) {
	var b [4]byte
	n, err := f.ReadAt(b[:], 0)
	if err != nil && err != io.EOF {
		return unknown, err
	}
	return sniffBytes(b[:n]), nil
}

func sniffBytes(b []byte) compression {
	n := len(b)
	switch {
	case n >= 2 && b[0] == 0x1f && b[1] == 0x8b:
		return gzipped
	case n >= 4 && b[0] == 0x28 && b[1] == 0xb5 && b[2] == 0x2f && b[3] == 0xfd:
		return zstded
	case n >= 4 && b[0]&0xf0 == 0x50 && b[1] == 0x2a && b[2] == 0x4d && b[3] == 0x18:
		return zstded
	}
	return plain
}

// detect decides how to decode a layer. A declared media type must agree
// with the bytes: a mismatch means a confused or lying producer.
func detect(f *os.File, mediaType string) (compression, *rejection, error) {
	declared := fromMediaType(mediaType)
	if declared < 0 {
		return unknown, reject(RuleMediaType, "media type %q", mediaType), nil
	}
	actual, err := sniff(f)
	if err != nil {
		return unknown, nil, err
	}
	if declared != unknown && declared != actual {
		return unknown, reject(RuleMediaTypeMismatch, "media type %q but the bytes are %s", mediaType, actual), nil
	}
	return actual, nil, nil
}

// detectBytes is detect for a stream, from its first bytes.
func detectBytes(head []byte, mediaType string) (compression, *rejection) {
	declared := fromMediaType(mediaType)
	if declared < 0 {
		return unknown, reject(RuleMediaType, "media type %q", mediaType)
	}
	actual := sniffBytes(head)
	if declared != unknown && declared != actual {
		return unknown, reject(RuleMediaTypeMismatch, "media type %q but the bytes are %s", mediaType, actual)
	}
	return actual, nil
}

// sourceFeeder is a decoder that reads its source in a goroutine of its
// own until it has decoded it all; the source is its alone until then.
type sourceFeeder interface{ feedsSource() }

// openDecoder opens the decompressed stream of a compressed layer read
// from blob (a buffered stream) or, when that is nil, from file. Gzip
// goes through prog when one is set and starts; a program that cannot
// run leaves the layer to the built-in decoder.
func openDecoder(c compression, blob *bufio.Reader, file *os.File, prog *GzipProgram, lim Limits) (io.ReadCloser, error) {
	if c == gzipped && prog != nil {
		var in io.Reader = blob
		if blob == nil {
			in = file
		}
		if dec, err := prog.open(in); err == nil {
			return dec, nil
		}
	}
	var src io.Reader = blob
	if blob == nil {
		src = bufio.NewReaderSize(file, 1<<20)
	}
	return decoder(c, src, lim)
}

// decoder opens the decompressed stream of a compressed layer; br should
// be buffered.
func decoder(c compression, br io.Reader, lim Limits) (io.ReadCloser, error) {
	switch c {
	case gzipped:
		return gzip.NewReader(br)
	case zstded:
		zd, err := zstd.NewReader(br,
			zstd.WithDecoderMaxWindow(lim.MaxZstdWindow),
			zstd.WithDecoderMaxMemory(lim.MaxZstdWindow),
			zstd.WithDecoderConcurrency(2),
		)
		if err != nil {
			return nil, err
		}
		return zd.IOReadCloser(), nil
	}
	return nil, fmt.Errorf("no decoder for %s", c)
}

// errBomb is returned by boundedReader once a layer has decompressed to far
// more bytes than its entries account for.
var errBomb = errors.New("decompressed bytes exceed what the entries declare")

// boundedReader caps the decompressed bytes of one layer at an allowance
// the reader raises as entries declare content.
type boundedReader struct {
	r     io.Reader
	n     int64
	allow int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.n >= b.allow {
		return 0, errBomb
	}
	if int64(len(p)) > b.allow-b.n {
		p = p[:b.allow-b.n]
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	return n, err
}

// posReader tracks the offset in an uncompressed layer file so content can
// be read back in place; it seeks so the tar reader can skip content.
type posReader struct {
	f   *os.File
	pos int64
}

func (p *posReader) Read(b []byte) (int, error) {
	n, err := p.f.Read(b)
	p.pos += int64(n)
	return n, err
}

func (p *posReader) Seek(off int64, whence int) (int64, error) {
	n, err := p.f.Seek(off, whence)
	if err == nil {
		p.pos = n
	}
	return n, err
}

// classify turns a read error into a rejection (bad bytes) or keeps it as
// an I/O error (bad host).
func classify(err error) (*rejection, error) {
	var pe *fs.PathError
	var se *sourceError
	var he *gzipHostError
	switch {
	case errors.As(err, &se):
		return nil, se.err
	case errors.As(err, &he):
		return nil, he
	case errors.Is(err, errBomb):
		return reject(RuleDecompressionBomb, "%v", err), nil
	case errors.Is(err, zstd.ErrWindowSizeExceeded), errors.Is(err, zstd.ErrDecoderSizeExceeded):
		return reject(RuleZstdWindow, "%v", err), nil
	case errors.As(err, &pe):
		return nil, err
	}
	return reject(RuleCorruptArchive, "%v", err), nil
}
