package layers

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"

	"github.com/klauspost/compress/gzip"
)

// GzipProgram decodes gzip layers in a child process instead of in Go:
// ISA-L's igzip inflates about twice as fast as the built-in decoder (and
// as zlib), and decoding is most of a cold build's CPU. The program is
// run as `PATH -d -c`, the blob on its stdin, the decoded stream on its
// stdout, with an empty environment, and as nobody when this process is
// root: hostile bytes reach it, so it holds no privilege and no secret.
//
// What it decodes is checked as the built-in decoder's output is: the
// tar reader, the decompression budget and the DiffID all sit on top.
// The two differ only on bytes after the last gzip member, which igzip
// ignores (as gzip(1) does) and the built-in decoder rejects when it
// reads to the end of the stream; the tree is the same either way.
type GzipProgram struct {
	Path string // absolute path of the program
}

// errGzipFailed is how the program reports a bad stream: it exited with
// a non-zero status. Classified as a corrupt archive.
var errGzipFailed = errors.New("gzip stream rejected by the decoder")

// gzipHostError marks a failure of the program itself (it could not run,
// or was killed), which says nothing about the layer's bytes.
type gzipHostError struct{ err error }

func (e *gzipHostError) Error() string { return "gzip decoder: " + e.err.Error() }
func (e *gzipHostError) Unwrap() error { return e.err }

// LookGzipProgram returns name (for example "igzip") from PATH, or nil
// when it is not installed or this system cannot run it safely.
func LookGzipProgram(name string) *GzipProgram {
	if !gzipProgramSupported {
		return nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return nil
	}
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	return &GzipProgram{Path: p}
}

// Check decodes a small stream with the program, as a build would run it:
// a program that is missing, cannot run as nobody, or decodes wrongly is
// found before the first build instead of falling back on every layer.
func (p *GzipProgram) Check() error {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	want := bytes.Repeat([]byte("cube template center "), 1000)
	zw.Write(want)
	zw.Close()
	dec, err := p.open(&buf)
	if err != nil {
		return err
	}
	defer dec.Close()
	got, err := io.ReadAll(dec)
	if err != nil {
		return fmt.Errorf("gzip decoder %s: %w", p.Path, err)
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("gzip decoder %s: decoded %d bytes, not the %d written", p.Path, len(got), len(want))
	}
	return nil
}

// String names the decoder in logs and reports.
func (p *GzipProgram) String() string {
	if p == nil {
		return "built-in"
	}
	return fmt.Sprintf("%s (child process)", p.Path)
}

// stderrTail keeps the first bytes a decoder writes to stderr, for the
// error message.
type stderrTail struct{ b []byte }

func (s *stderrTail) Write(p []byte) (int, error) {
	if room := 512 - len(s.b); room > 0 {
		s.b = append(s.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

var _ io.Writer = (*stderrTail)(nil)
