package ext4stream

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/layers"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/flattenertest"
)

// fuzzBuild builds tree into a fresh directory, capped at 64 MiB so that
// huge declared sizes fail fast, and checks the outcome: a refusal names a
// rule and leaves nothing behind; a success is an image e2fsck accepts.
func fuzzBuild(t *testing.T, tree []byte) error {
	dir := t.TempDir()
	out := filepath.Join(dir, "rootfs.ext4")
	es, err := tryEntries(t, tree, false)
	if err != nil {
		return err // not a tar: nothing a flattener would hand over
	}
	_, err = New().Build(context.Background(), ports.BuildSpec{OutPath: out, UUID: testUUID, Time: buildTime, MaxSizeBytes: 64 << 20}, es)
	if err != nil {
		// Invalid input is a tree refusal with a rule, or the size cap.
		if errors.Is(err, core.ErrInvalidArgument) && flattenertest.RuleOf(err) == "" && !strings.Contains(err.Error(), "MaxSizeBytes") {
			t.Fatalf("refusal names no rule: %v", err)
		}
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Fatalf("failed build left %v", left)
		}
		return err
	}
	if rc, msg := fsck(t, out); rc != 0 {
		t.Fatalf("e2fsck exit %d:\n%s", rc, msg)
	}
	return nil
}

// FuzzFeed hands random bytes to the builder as a tree: no panic, a
// refusal with a rule or a clean image.
func FuzzFeed(f *testing.F) {
	for _, s := range flattenertest.Seeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<20 {
			return
		}
		fuzzBuild(t, data)
	})
}

// FuzzBuildTreeOps is structure-aware (flattenertest.TreeOps): whatever the
// flattener accepts is a resolved tree and must build; the same entries
// unflattened must be refused or build cleanly.
func FuzzBuildTreeOps(f *testing.F) {
	for _, s := range flattenertest.TreeOpsSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v := flattenertest.NewVictim(t)
		ls := flattenertest.TreeOps(data, v)
		if ls == nil {
			return
		}
		var tree []byte
		if _, err := (layers.Flattener{}).Flatten(context.Background(), flattenertest.PlainLayers(t, ls...), func(es ports.Tree) error {
			tree = flattenertest.EntriesTar(t, es)
			return nil
		}); err == nil {
			if err := fuzzBuild(t, tree); err != nil {
				t.Fatalf("the builder refused a flattened tree: %v", err)
			}
		}
		var all []flattenertest.Entry
		for _, l := range ls {
			all = append(all, l...)
		}
		fuzzBuild(t, flattenertest.Tar(t, all...))
		v.Check(t)
	})
}
