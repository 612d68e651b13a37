package layers

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/builder/ext4stream"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/buildertest"
	"github.com/cubesandbox/templatecenter/ports/flattenertest"
)

// TestImageGolden pins the sha256 of the ext4 images the default builder
// makes of trees Flatten hands over: a synthetic image with every kind of
// entry and every accepted case of the flattener corpus that does not name
// the victim's (temporary) directory. However Flatten keeps its tree, the
// builder must get the same entries in the same order (run with -update
// to rewrite testdata/images.sha256 after an intended change).
func TestImageGolden(t *testing.T) {
	type input struct {
		name   string
		layers []Layer
	}
	inputs := []input{{"synth-3000", synthImage(t, t.TempDir(), 3000)}}
	v := flattenertest.NewVictim(t)
	for _, c := range flattenertest.Cases() {
		if c.Flatten != "" || c.Layers == nil || !c.Limits.IsZero() {
			continue
		}
		blobs := c.LayerBlobs(t, v, mtTar)
		named := false
		for _, b := range blobs {
			named = named || bytes.Contains(b.Data, []byte(v.Base)) || bytes.Contains(b.Data, []byte(v.HostTmp))
		}
		if !named {
			inputs = append(inputs, input{"corpus-" + c.Name, writeLayers(t, blobs...)})
		}
	}
	var got strings.Builder
	for _, in := range inputs {
		out := filepath.Join(t.TempDir(), "rootfs.ext4")
		var res ports.BuildResult
		_, err := Flatten(context.Background(), in.layers, DefaultLimits(), func(tree ports.Tree) error {
			var err error
			res, err = ext4stream.New().Build(context.Background(), ports.BuildSpec{
				OutPath: out, UUID: buildertest.FixtureUUID, Time: time.Unix(1700000000, 0)}, tree)
			return err
		})
		if err != nil {
			t.Fatalf("%s: %v", in.name, err)
		}
		sum := res.SHA256
		if sum == "" {
			if sum, err = buildertest.FileSHA256(out); err != nil {
				t.Fatal(err)
			}
		}
		got.WriteString(sum + "  " + in.name + "\n")
	}
	golden := filepath.Join("testdata", "images.sha256")
	if *update {
		if err := os.WriteFile(golden, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if got.String() != string(want) {
		t.Fatalf("images differ from %s:\n%s", golden, got.String())
	}
}
