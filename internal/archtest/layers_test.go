package archtest

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// folder is one drawer of the tree and the project folders its packages
// may import (their non-test imports; tests may import anything).
type folder struct {
	prefix string   // the drawer, a path under the module
	may    []string // project folders its packages may import
	why    string
}

// folders covers every folder that holds Go packages; the most specific
// prefix wins. A package in no listed folder fails the test, so a new
// top-level folder needs its rule here first.
var folders = []folder{
	{"core", []string{"core", "ports"}, "the domain: pure, depends on the contracts only (external imports: TestCoreDependsOnlyOnPortsAndPureLibraries)"},
	{"ports", []string{"core", "ports", "testkit"}, "contracts, their suites and mocks; suites may use the test kits"},
	{"testkit", []string{"core", "ports", "testkit"}, "test kits the suites and system tests share; no implementation"},
	{"adapters", []string{"core", "ports", "ent", "adapters"}, "implementations; another adapter only through adapterEdges"},
	{"ent", []string{"ent"}, "the schema and the code generated from it"},
	{"plugins", []string{"core", "ports", "adapters/builder"}, "builder programs served out of process: the builder and the plugin protocol"},
	{"apps", []string{"core", "ports", "adapters", "ent", "apps"}, "binaries: configuration, wiring, processes"},
	{"examples", []string{"core", "ports", "adapters"}, "runnable uses of the library, as a user would write them"},
	{"internal/archtest", nil, "this test"},
	{"internal/systemtest", []string{"core", "ports", "adapters", "ent", "apps", "testkit", "internal/systemtest"}, "fault, load, soak, adoption and end-to-end suites over real processes"},
	{"internal/tools", []string{"core", "ports", "adapters", "ent", "apps", "testkit", "internal/tools"}, "programs for developers: demo, bench, doc generators, migration writer, tool pins"},
	{"deploy", nil, "deployment files and their tests"},
}

// folderOf returns the rule of pkg (a path under the module), or nil.
func folderOf(pkg string) *folder {
	var best *folder
	for i := range folders {
		f := &folders[i]
		if (pkg == f.prefix || strings.HasPrefix(pkg, f.prefix+"/")) && (best == nil || len(f.prefix) > len(best.prefix)) {
			best = f
		}
	}
	return best
}

// importRefused says why pkg may not import imp (both under the module),
// or "".
func importRefused(pkg, imp string) string {
	f := folderOf(pkg)
	if f == nil {
		return "its folder has no rule in internal/archtest (add one to folders)"
	}
	for _, m := range f.may {
		if imp == m || strings.HasPrefix(imp, m+"/") {
			return ""
		}
	}
	return f.prefix + " may import only " + strings.Join(f.may, ", ") + " (" + f.why + ")"
}

func TestEveryFolderKeepsItsImportRules(t *testing.T) {
	out, err := exec.Command("go", "list", "-json", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		seen++
		pkg := strings.TrimPrefix(p.ImportPath, module+"/")
		if folderOf(pkg) == nil {
			t.Errorf("%s: %s", pkg, importRefused(pkg, ""))
			continue
		}
		for _, i := range p.Imports {
			imp, ok := strings.CutPrefix(i, module+"/")
			if !ok {
				continue
			}
			if reason := importRefused(pkg, imp); reason != "" {
				t.Errorf("%s imports %s: %s", pkg, imp, reason)
			}
		}
	}
	if seen < 100 {
		t.Fatalf("go list found %d packages; the module has far more", seen)
	}
}

// TestPortsContractsImportOnlyCore holds the contracts themselves (the
// ports package, not its suites) to what ARCHITECTURE.md says: core, the
// standard library and pure type libraries.
func TestPortsContractsImportOnlyCore(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-json", module+"/ports").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.Standard {
			continue
		}
		checkImport(t, p.ImportPath)
	}
}

// TestFolderRulesCanFail makes sure the rules refuse what they are for.
func TestFolderRulesCanFail(t *testing.T) {
	refused := [][2]string{
		{"ports/buildertest", "adapters/layers"},
		{"testkit/testenv", "adapters/store/entstore"},
		{"adapters/registry", "apps/config"},
		{"adapters/registry", "internal/tools/bench"},
		{"ent/migrate", "adapters/store/entstore"},
		{"plugins/ext4stream", "adapters/httpapi/cubeapi"},
		{"apps/cubemaster", "internal/tools/demo"},
		{"apps/cubemaster", "testkit/testenv"},
		{"examples/embed-core", "internal/systemtest/faults"},
		{"core/control", "adapters/store/memstore"},
		{"newfolder/x", "core"},
	}
	for _, r := range refused {
		if importRefused(r[0], r[1]) == "" {
			t.Errorf("%s -> %s is not refused", r[0], r[1])
		}
	}
	allowed := [][2]string{
		{"ports/buildertest", "testkit/testenv"},
		{"adapters/builder/mkfs", "adapters/layers"},
		{"plugins/ext4stream", "adapters/builder/ext4stream"},
		{"internal/tools/migrationgen", "adapters/store/entstore"},
		{"internal/systemtest/faults/harness", "apps/config"},
	}
	for _, a := range allowed {
		if r := importRefused(a[0], a[1]); r != "" {
			t.Errorf("%s -> %s is refused: %s", a[0], a[1], r)
		}
	}
}
