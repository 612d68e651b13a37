package archtest

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/cubesandbox/templatecenter"

// forbidden are import path prefixes core must never reach, directly or
// through another package.
var forbidden = []string{
	"entgo.io/",
	"ariga.io/",
	"github.com/go-chi/",
	"github.com/regclient/",
	"gocloud.dev/",
	"github.com/redis/rueidis",
	"github.com/hashicorp/go-plugin",
	"github.com/go-sql-driver/",
	"github.com/jackc/",
	"github.com/lib/pq",
	"modernc.org/sqlite",
	"github.com/mattn/go-sqlite3",
	"google.golang.org/grpc",
	module + "/adapters",
	module + "/apps",
	module + "/ent",
	module + "/plugins",
}

// allowedOutside lists the only non-standard, non-project modules core may
// import: pure type libraries.
var allowedOutside = []string{
	"github.com/opencontainers/image-spec/",
	"github.com/opencontainers/go-digest",
}

type pkg struct {
	ImportPath string
	Standard   bool
	Deps       []string
}

func TestCoreDependsOnlyOnPortsAndPureLibraries(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-json", module+"/core/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		seen++
		if p.Standard {
			continue
		}
		checkImport(t, p.ImportPath)
	}
	if seen == 0 {
		t.Fatal("go list returned no packages for core/...")
	}
}

func checkImport(t *testing.T, path string) {
	t.Helper()
	for _, f := range forbidden {
		if strings.HasPrefix(path, f) {
			t.Errorf("core depends on %s, which the architecture forbids", path)
			return
		}
	}
	if strings.HasPrefix(path, module+"/core") || strings.HasPrefix(path, module+"/ports") {
		return
	}
	for _, a := range allowedOutside {
		if strings.HasPrefix(path, a) {
			return
		}
	}
	if !strings.Contains(strings.SplitN(path, "/", 2)[0], ".") {
		return // standard library (vendored golang.org/x under std is reported as Standard)
	}
	t.Errorf("core depends on %s, which is not a pure type library on the allow list", path)
}

// TestForbiddenListCatchesAdapters makes sure the check itself can fail.
func TestForbiddenListCatchesAdapters(t *testing.T) {
	for _, p := range []string{"entgo.io/ent", module + "/adapters/store/entstore", "github.com/regclient/regclient", "gocloud.dev/blob"} {
		hit := false
		for _, f := range forbidden {
			if strings.HasPrefix(p, f) {
				hit = true
			}
		}
		if !hit {
			t.Errorf("%s is not caught by the forbidden list", p)
		}
	}
}
