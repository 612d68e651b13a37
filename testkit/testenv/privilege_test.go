package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// recorder is a testing.TB that records instead of stopping the test.
type recorder struct {
	testing.TB
	skipped, failed string
	errors          []string
	cleanups        []func()
}

type stopped struct{}

func (r *recorder) Helper()                   {}
func (r *recorder) Cleanup(f func())          { r.cleanups = append(r.cleanups, f) }
func (r *recorder) Skip(a ...any)             { r.skipped = fmt.Sprint(a...); panic(stopped{}) }
func (r *recorder) Skipf(f string, a ...any)  { r.skipped = fmt.Sprintf(f, a...); panic(stopped{}) }
func (r *recorder) Fatal(a ...any)            { r.failed = fmt.Sprint(a...); panic(stopped{}) }
func (r *recorder) Fatalf(f string, a ...any) { r.failed = fmt.Sprintf(f, a...); panic(stopped{}) }
func (r *recorder) Errorf(f string, a ...any) { r.errors = append(r.errors, fmt.Sprintf(f, a...)) }

// run calls fn with a recorder, then its cleanups (the test ending).
func run(t *testing.T, fn func(tb testing.TB)) *recorder {
	t.Helper()
	r := &recorder{TB: t}
	func() {
		defer func() {
			if p := recover(); p != nil {
				if _, ok := p.(stopped); !ok {
					panic(p)
				}
			}
		}()
		fn(r)
	}()
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	return r
}

func asUser(t *testing.T, uid int) {
	old := euid
	euid = func() int { return uid }
	t.Cleanup(func() { euid = old })
}

func TestRoot(t *testing.T) {
	for _, tc := range []struct {
		name               string
		uid                int
		required           string
		wantSkip, wantFail bool
	}{
		{"root", 0, "1", false, false},
		{"not root, servers required", 1000, "1", false, true},
		{"not root, servers optional", 1000, "", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asUser(t, tc.uid)
			t.Setenv(RequireFlag, tc.required)
			r := run(t, func(tb testing.TB) { Root(tb, "the test needs root") })
			if (r.skipped != "") != tc.wantSkip || (r.failed != "") != tc.wantFail {
				t.Fatalf("skipped %q, failed %q; want skip %v, fail %v", r.skipped, r.failed, tc.wantSkip, tc.wantFail)
			}
		})
	}
}

// TestLoopMount mounts a good image, and holds a corrupt one to be a
// failure whether or not servers are required: only a missing privilege
// may skip.
func TestLoopMount(t *testing.T) {
	Root(t, "loop mounts need root")
	mkfs := Tool(t, "mkfs.ext4")
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "hello"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.ext4")
	if out, err := exec.Command(mkfs, "-q", "-F", "-d", src, good, "8M").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	bad := filepath.Join(dir, "bad.ext4")
	if err := os.WriteFile(bad, make([]byte, 8<<20), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, required := range []string{"1", ""} {
		t.Run("required="+required, func(t *testing.T) {
			t.Setenv(RequireFlag, required)
			mnt := t.TempDir()
			var read []byte
			r := run(t, func(tb testing.TB) {
				LoopMount(tb, good, mnt)
				read, _ = os.ReadFile(filepath.Join(mnt, "hello"))
			})
			if r.skipped != "" || r.failed != "" || len(r.errors) > 0 || string(read) != "hi\n" {
				t.Fatalf("good image: skipped %q, failed %q, errors %q, read %q", r.skipped, r.failed, r.errors, read)
			}
			if _, err := os.Stat(filepath.Join(mnt, "hello")); !os.IsNotExist(err) {
				t.Fatalf("still mounted after the test ended (%v)", err)
			}

			r = run(t, func(tb testing.TB) { LoopMount(tb, bad, t.TempDir()) })
			if r.skipped != "" || r.failed == "" {
				t.Fatalf("corrupt image: skipped %q, failed %q; want a failure", r.skipped, r.failed)
			}
			t.Logf("corrupt image: %s", r.failed)

			asUser(t, 1000)
			r = run(t, func(tb testing.TB) { LoopMount(tb, good, t.TempDir()) })
			if required == "1" && (r.failed == "" || r.skipped != "") || required == "" && (r.skipped == "" || r.failed != "") {
				t.Fatalf("not root: skipped %q, failed %q", r.skipped, r.failed)
			}
		})
	}
}
