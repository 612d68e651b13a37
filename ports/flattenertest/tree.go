package flattenertest

import (
	"archive/tar"
	"context"
	"os"
	"path"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/ports"
)

// CheckTree fails t unless tree (as EntriesTar writes it) meets the
// ports.TreeEntry contract:
// clean relative names, no whiteouts, no duplicates, parents (as
// directories) before children, siblings sorted, hard links to earlier
// regular files.
func CheckTree(t testing.TB, tree []byte) {
	t.Helper()
	seen := map[string]byte{".": tar.TypeDir}
	last := map[string]string{} // directory -> last child name
	for _, e := range ReadTar(t, tree) {
		n := e.Header.Name
		if n == "" || n == "." || strings.HasPrefix(n, "/") || path.Clean(n) != n || n == ".." || strings.HasPrefix(n, "../") {
			t.Fatalf("unclean name %q", n)
		}
		for _, c := range strings.Split(n, "/") {
			if strings.HasPrefix(c, ".wh.") {
				t.Fatalf("whiteout left in the tree: %q", n)
			}
		}
		if _, dup := seen[n]; dup {
			t.Fatalf("duplicate %q", n)
		}
		dir, base := path.Split(n)
		dir = path.Clean(dir)
		if seen[dir] != tar.TypeDir {
			t.Fatalf("%q before its parent directory", n)
		}
		if prev, ok := last[dir]; ok && prev >= base {
			t.Fatalf("%q after its sibling %q: siblings must be sorted", n, prev)
		}
		last[dir] = base
		if e.Header.Typeflag == tar.TypeLink && seen[e.Header.Linkname] != tar.TypeReg {
			t.Fatalf("hard link %q to %q, which is not an earlier regular file", n, e.Header.Linkname)
		}
		typ := e.Header.Typeflag
		if typ == tar.TypeLink {
			typ = tar.TypeReg
		}
		seen[n] = typ
	}
}

// TreeConsumer takes one tree (ports.TreeEntry's contract): a builder or a
// staging extractor. dest is an empty directory beside the victim files; a
// consumer that writes a host tree writes it there, a builder writes its
// image (and any scratch) there.
type TreeConsumer func(ctx context.Context, tree ports.Tree, dest string) error

// TreeOptions describes a consumer for RunTreeCorpus.
type TreeOptions struct {
	// WithLimits returns the consumer bounded by lim. Without it, cases
	// whose outcome depends on a budget are skipped.
	WithLimits func(lim Limits) TreeConsumer
	// CleansUp: a refused tree leaves dest empty (builders remove their
	// temporary files; an extractor leaves a partial tree to its caller).
	CleansUp bool
}

// RunTreeCorpus holds a tree consumer to the tree-level part of the
// hostile corpus: everything a hostile or buggy flattener could hand a
// builder. Cases about tar framing (corrupt-archive) are skipped: a tree
// of entries has none. Each case must be refused with its rule (or accepted,
// for the few that hold legitimate but dangerous-looking content), and
// nothing outside dest may change; device nodes are never created on the
// host.
func RunTreeCorpus(t *testing.T, consume TreeConsumer, opt TreeOptions) {
	ran := 0
	for _, c := range Cases() {
		if !c.TreeLevel() {
			continue
		}
		ran++
		t.Run(c.Name, func(t *testing.T) {
			if c.Tree == RuleCorruptArchive {
				t.Skip("tar framing: a tree of entries has none")
			}
			run := consume
			if !c.Limits.IsZero() {
				if opt.WithLimits == nil {
					t.Skip("depends on budgets this consumer does not take")
				}
				run = opt.WithLimits(c.Limits)
			}
			v := NewVictim(t)
			err := run(context.Background(), TarEntries(t, c.TreeStream(t, v), false), v.Root)
			if c.TreeOK {
				if err != nil {
					t.Fatalf("refused a legitimate tree: %v", err)
				}
			} else {
				t.Logf("%v", err)
				WantRule(t, err, c.Tree)
				if opt.CleansUp {
					if left, _ := os.ReadDir(v.Root); len(left) > 0 {
						t.Errorf("refused tree left %v behind", names(left))
					}
				}
			}
			if devs := DeviceNodes(v.Root); len(devs) > 0 {
				t.Errorf("device nodes created on the host: %v", devs)
			}
			v.Check(t)
		})
	}
	if ran < 40 {
		t.Errorf("tree corpus has %d cases, want at least 40", ran)
	}
}

func names(es []os.DirEntry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}
