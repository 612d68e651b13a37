package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// TestRun builds the plugin binary, runs the host against it and checks
// the image it wrote.
func TestRun(t *testing.T) {
	gobin := testenv.Tool(t, "go")
	dir := t.TempDir()
	pluginBin := filepath.Join(dir, "countingbuilder")
	build := exec.Command(gobin, "build", "-o", pluginBin, "./countingbuilder")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build the plugin: %v\n%s", err, out)
	}

	img := filepath.Join(dir, "demo.ext4")
	var out bytes.Buffer
	if err := run(context.Background(), &out, pluginBin, img); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	data, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := fileSHA256(img)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`loaded builder "counting-ext4stream" (API v1)`,
		"build with a 1 MiB cap: refused (core.ErrInvalidArgument)",
		// The plugin's own log line, forwarded by go-plugin.
		"host.countingbuilder: tree streamed:",
		"entries=5",
		"content_bytes=53",
		"sha256 " + sum,
		"rebuilt: identical bytes: true",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// An ext4 superblock starts at 1024; its magic 0xEF53 is at offset 56.
	if len(data) < 2048 || binary.LittleEndian.Uint16(data[1024+56:]) != 0xEF53 {
		t.Fatalf("%s is not an ext4 image", img)
	}
	if len(data)%(2<<20) != 0 {
		t.Errorf("image is %d bytes, not a multiple of 2 MiB", len(data))
	}
	if _, err := os.Stat(img + ".again"); !os.IsNotExist(err) {
		t.Errorf("the rebuilt copy was left behind: %v", err)
	}

	t.Run("e2fsck", func(t *testing.T) {
		if out, err := exec.Command(testenv.Tool(t, "e2fsck"), "-fn", img).CombinedOutput(); err != nil {
			t.Fatalf("e2fsck -fn: %v\n%s", err, out)
		}
	})
	t.Run("debugfs", func(t *testing.T) {
		got, err := exec.Command(testenv.Tool(t, "debugfs"), "-R", "cat /bin/hello", img).Output()
		if err != nil || !strings.Contains(string(got), "echo hello from a plugin-built rootfs") {
			t.Fatalf("debugfs cat /bin/hello: %v\n%s", err, got)
		}
	})
}
