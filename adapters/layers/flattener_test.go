package layers

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

func TestFlattenerPort(t *testing.T) {
	ls := plainLayers(t, []ent{reg("a", "abc"), dir("d")}, []ent{reg("../x", "")})
	var out bytes.Buffer
	st, err := Flattener{}.Flatten(context.Background(), []ports.FlattenLayer{{Path: ls[0].Path, MediaType: mtTar, Digest: "sha256:a"}}, &out)
	if err != nil || st != (ports.TreeStats{Entries: 2, ContentBytes: 3}) {
		t.Fatalf("%+v %v", st, err)
	}
	_, err = Flattener{}.Flatten(context.Background(), []ports.FlattenLayer{{Path: ls[0].Path}, {Path: ls[1].Path, Digest: "sha256:b"}}, &out)
	if !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("got %v", err)
	}
}
