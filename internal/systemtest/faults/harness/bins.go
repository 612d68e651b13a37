package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Module is the module path of the binaries Binaries builds.
const Module = "github.com/cubesandbox/templatecenter"

var (
	binOnce sync.Once
	binDir  string
	binErr  error
	built   bool
)

// BinDirEnv names a directory of binaries already built from this tree
// (make test sets it to bin/ after make build), used instead of building.
const BinDirEnv = "CUBE_TEST_BIN_DIR"

var binaries = []string{"templatecenter", "cubemaster", "nodeagent", "ext4stream", "cubemastercli"}

// Binaries builds templatecenter, cubemaster, nodeagent, the ext4stream
// plugin and cubemastercli once per test binary and returns their
// directory (or returns $CUBE_TEST_BIN_DIR when it holds all five). Call Cleanup from TestMain
// to remove what it built.
func Binaries(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		if d := os.Getenv(BinDirEnv); d != "" {
			for _, b := range binaries {
				if _, err := os.Stat(filepath.Join(d, b)); err != nil {
					binErr = fmt.Errorf("%s=%s: %w", BinDirEnv, d, err)
					return
				}
			}
			binDir = d
			return
		}
		binDir, binErr = os.MkdirTemp("", "cube-faults-bin-")
		if binErr != nil {
			return
		}
		built = true
		args := []string{"build", "-o", binDir + "/"}
		for _, pkg := range []string{"apps/templatecenter", "apps/cubemaster", "apps/nodeagent", "plugins/ext4stream", "apps/cubemastercli"} {
			args = append(args, Module+"/"+pkg)
		}
		out, err := exec.Command("go", args...).CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binDir
}

// Bin is the path of one built binary.
func Bin(t testing.TB, name string) string { return filepath.Join(Binaries(t), name) }

// Cleanup removes what the package-level helpers made (the binaries).
func Cleanup() {
	if built {
		os.RemoveAll(binDir)
	}
}
