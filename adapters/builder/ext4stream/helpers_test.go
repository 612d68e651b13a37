package ext4stream

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// entry is one tar entry for test trees; Body is the content of regular files.
type entry struct {
	tar.Header
	Body string
}

func dir(name string, mode int64) entry {
	return entry{Header: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode}}
}

func file(name string, mode int64, body string) entry {
	return entry{Header: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode}, Body: body}
}

var testMtime = time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)

// tarOf encodes entries as a PAX tar. Entries without a ModTime get testMtime.
func tarOf(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.Header
		if h.ModTime.IsZero() {
			h.ModTime = testMtime
		}
		h.Format = tar.FormatPAX
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.Body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("tar header %s: %v", h.Name, err)
		}
		if _, err := tw.Write([]byte(e.Body)); err != nil {
			t.Fatalf("tar body %s: %v", h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// fsck runs `e2fsck -fn` and returns its exit code and output.
func fsck(t testing.TB, img string) (int, string) {
	t.Helper()
	bin := testenv.Tool(t, "e2fsck")
	out, err := exec.Command(bin, "-fn", img).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("e2fsck: %v", err)
	return 0, ""
}

// debugfs runs one debugfs request against img.
func debugfs(t testing.TB, img, request string) string {
	t.Helper()
	bin := testenv.Tool(t, "debugfs")
	out, err := exec.Command(bin, "-R", request, img).CombinedOutput()
	if err != nil {
		t.Fatalf("debugfs -R %q: %v\n%s", request, err, out)
	}
	return string(out)
}

func mustContain(t testing.TB, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s: missing %q in:\n%s", what, w, got)
		}
	}
}

// noLeftovers fails if dir holds anything but the named files.
func noLeftovers(t testing.TB, dir string, allowed ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	ok := map[string]bool{}
	for _, a := range allowed {
		ok[filepath.Base(a)] = true
	}
	for _, e := range ents {
		if !ok[e.Name()] {
			t.Errorf("unexpected file left in %s: %s", dir, e.Name())
		}
	}
}
