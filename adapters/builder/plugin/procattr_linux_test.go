package plugin

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pluginPathEnv tells the host helper which plugin to load.
const pluginPathEnv = "CUBE_BUILDER_PLUGIN_TEST_PATH"

// hostHelper is a host process: it loads the plugin, prints its pid and
// waits to be killed.
func hostHelper() {
	b, err := Load(context.Background(), os.Getenv(pluginPathEnv), Options{})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("plugin", b.client.ReattachConfig().Pid)
	select {}
}

// A host killed with SIGKILL takes its plugin along: nothing is left
// running (go-plugin alone only cleans up on a clean exit).
func TestPluginDiesWithKilledHost(t *testing.T) {
	if pluginBin == "" {
		t.Skip("no go toolchain to build the plugin")
	}
	host := exec.Command(os.Args[0], "-test.run=^$")
	host.Env = append(os.Environ(), helperEnv+"=host", pluginPathEnv+"="+pluginBin)
	out, err := host.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		host.Process.Kill()
		host.Wait()
		t.Fatalf("host helper: %v", err)
	}
	f := strings.Fields(line)
	if len(f) != 2 || f[0] != "plugin" {
		host.Process.Kill()
		host.Wait()
		t.Fatalf("host helper said %q", line)
	}
	pid, _ := strconv.Atoi(f[1])
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("plugin %d not running under its host: %v", pid, err)
	}
	host.Process.Kill()
	host.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL) // it is ours: the helper started it
			t.Fatalf("plugin %d still running 10s after its host was killed", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
