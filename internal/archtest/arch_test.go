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

// layerImports lists, for every package under prefix, its non-test imports
// inside this module.
func layerImports(t *testing.T, prefix string) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", module+"/"+prefix+"/...").Output()
	if err != nil {
		t.Fatalf("go list %s: %v", prefix, err)
	}
	imports := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		for _, i := range p.Imports {
			if strings.HasPrefix(i, module+"/") {
				imports[p.ImportPath] = append(imports[p.ImportPath], i)
			}
		}
	}
	if len(imports) == 0 {
		t.Fatalf("go list found no %s packages importing the module", prefix)
	}
	return imports
}

// TestPortsDependOnNoAdapter keeps ports (contracts, suites, mocks) free of
// implementations, directly or through another package.
func TestPortsDependOnNoAdapter(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", module+"/ports/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if reason := portsForbidden(dep); reason != "" {
			t.Errorf("ports depends on %s: %s", dep, reason)
		}
	}
}

func portsForbidden(dep string) string {
	for _, f := range []string{"/adapters", "/apps", "/plugins", "/ent", "/internal"} {
		if strings.HasPrefix(dep, module+f+"/") || dep == module+f {
			return "ports may depend only on core, the test kits and the standard library"
		}
	}
	return ""
}

// adapterEdges are the only imports from one adapter into another, each
// with its reason. Anything else makes an adapter depend on another's
// internals and fails the test.
var adapterEdges = map[string]string{
	"builder -> layers":      "the mkfs builder stages the tree with the safe extractor",
	"builder -> diskio":      "the ext4stream and mkfs builders write their images with the shared direct-I/O writer",
	"cubelet -> diskio":      "the node agent writes a downloaded artifact with the shared direct-I/O writer",
	"registry -> layercache": "the image source keeps verified layers in the content-addressed cache",
}

// adapterUnit names the adapter a package belongs to: its first directory
// under adapters/ (httpapi's routers, clients and wire format are one
// adapter; so are the implementations grouped under builder/, lock/,
// progress/ and store/).
func adapterUnit(pkg string) string {
	rest := strings.TrimPrefix(pkg, module+"/adapters/")
	return strings.SplitN(rest, "/", 2)[0]
}

func TestAdaptersImportOtherAdaptersOnlyByTheAllowList(t *testing.T) {
	for pkg, imps := range layerImports(t, "adapters") {
		for _, i := range imps {
			if !strings.HasPrefix(i, module+"/adapters/") {
				continue
			}
			if reason := adapterEdgeRefused(pkg, i); reason != "" {
				t.Errorf("%s imports %s: %s", pkg, i, reason)
			}
		}
	}
}

func adapterEdgeRefused(pkg, imp string) string {
	from, to := adapterUnit(pkg), adapterUnit(imp)
	if from == to {
		return ""
	}
	if _, ok := adapterEdges[from+" -> "+to]; ok {
		return ""
	}
	return "an adapter may import another only through the allow-list in internal/archtest"
}

// TestLayerRulesCanFail makes sure the new checks catch what they are for.
func TestLayerRulesCanFail(t *testing.T) {
	if portsForbidden(module+"/adapters/layers") == "" || portsForbidden(module+"/apps/cubemaster") == "" || portsForbidden(module+"/internal/tools/bench") == "" {
		t.Error("a ports -> adapters/apps edge is not caught")
	}
	if portsForbidden(module+"/core") != "" || portsForbidden("io") != "" {
		t.Error("ports -> core or the standard library is refused")
	}
	if adapterEdgeRefused(module+"/adapters/httpapi/tcclient", module+"/adapters/store/entstore") == "" {
		t.Error("an adapter -> adapter edge outside the allow-list is not caught")
	}
	if adapterEdgeRefused(module+"/adapters/httpapi/tcclient", module+"/adapters/httpapi/wire") != "" ||
		adapterEdgeRefused(module+"/adapters/builder/mkfs", module+"/adapters/layers") != "" {
		t.Error("an allowed edge is refused")
	}
}
