// Command builder-plugin is the host side of an out-of-process rootfs
// builder: it starts the countingbuilder plugin (./countingbuilder) with
// adapters/builder/plugin.Load, hands it a small tree made in Go (which the
// plugin, reading tar, gets as a tar stream) and prints the resulting
// ext4's size and sha256.
//
//	go build -o /tmp/countingbuilder ./examples/builder-plugin/countingbuilder
//	go run ./examples/builder-plugin -plugin /tmp/countingbuilder -out /tmp/demo.ext4
package main

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/cubesandbox/templatecenter/adapters/builder/plugin"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

func main() {
	pluginPath := flag.String("plugin", "", "path of the built countingbuilder binary (required)")
	out := flag.String("out", "demo.ext4", "where to write the image")
	flag.Parse()
	if *pluginPath == "" {
		log.Fatal("-plugin is required: go build -o /tmp/countingbuilder ./examples/builder-plugin/countingbuilder")
	}
	if err := run(context.Background(), os.Stdout, *pluginPath, *out); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, w io.Writer, pluginPath, outPath string) error {
	// The plugin's log lines arrive on a go-plugin goroutine while this
	// one prints: both write through one lock.
	w = &lockedWriter{w: w}
	logger := hclog.New(&hclog.LoggerOptions{Name: "host", Level: hclog.Info, Output: w})

	// Load starts the process, checks the handshake and negotiates the API
	// version. The result is an ordinary ports.RootfsBuilder.
	b, err := plugin.Load(ctx, pluginPath, plugin.Options{Logger: logger})
	if err != nil {
		return err
	}
	// Close kills the process and waits until its stderr is drained, so
	// every plugin log line is out before run returns.
	defer b.Close()
	fmt.Fprintf(w, "loaded builder %q (API %s)\n", b.Name(), b.APIVersion())

	tree, done, err := demoTree()
	if err != nil {
		return err
	}
	defer done()
	// Identical tree, UUID and time give identical bytes (the UUID and
	// time would derive from the spec fingerprint and the image config).
	spec := func(out string) ports.BuildSpec {
		return ports.BuildSpec{OutPath: out,
			UUID: "6f1c8e2a-0d3b-4c5e-9f7a-1b2c3d4e5f60", Time: time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)}
	}

	// Errors keep their class across the process boundary: no image fits
	// a 1 MiB cap (images are multiples of 2 MiB), which is the caller's
	// invalid argument.
	capped := spec(outPath)
	capped.MaxSizeBytes = 1 << 20
	if _, err := b.Build(ctx, capped, tree); !errors.Is(err, core.ErrInvalidArgument) {
		return fmt.Errorf("build with a 1 MiB cap: got %v, want an error wrapping core.ErrInvalidArgument", err)
	}
	fmt.Fprintln(w, "build with a 1 MiB cap: refused (core.ErrInvalidArgument)")

	res, err := b.Build(ctx, spec(outPath), tree)
	if err != nil {
		return err
	}
	sum, err := fileSHA256(outPath)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "built %s: %d bytes, sha256 %s\n", outPath, res.SizeBytes, sum)

	again := outPath + ".again"
	defer os.Remove(again)
	if _, err := b.Build(ctx, spec(again), tree); err != nil {
		return err
	}
	sum2, err := fileSHA256(again)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "rebuilt: identical bytes: %t\n", sum2 == sum)
	return nil
}

// demoTree is a tiny root filesystem as a flattener hands it over
// (ports.TreeSlice): clean relative paths, parents before children, each
// file's content at an offset of a file held open until done.
func demoTree() (ports.TreeSlice, func(), error) {
	content, err := os.CreateTemp("", "demo-tree-")
	if err != nil {
		return nil, nil, err
	}
	done := func() { content.Close(); os.Remove(content.Name()) }
	mtime := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	var tree ports.TreeSlice
	var off int64
	for _, e := range []struct {
		name, body, link string
		typ              byte
		mode             int64
	}{
		{name: "bin", typ: tar.TypeDir, mode: 0o755},
		{name: "bin/hello", typ: tar.TypeReg, mode: 0o755, body: "#!/bin/sh\necho hello from a plugin-built rootfs\n"},
		{name: "bin/hi", typ: tar.TypeSymlink, mode: 0o777, link: "hello"},
		{name: "etc", typ: tar.TypeDir, mode: 0o755},
		{name: "etc/hostname", typ: tar.TypeReg, mode: 0o644, body: "demo\n"},
	} {
		te := ports.TreeEntry{Header: &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link,
			Size: int64(len(e.body)), ModTime: mtime, Format: tar.FormatPAX}}
		if e.body != "" {
			if _, err := content.WriteString(e.body); err != nil {
				done()
				return nil, nil, err
			}
			te.File, te.Offset = content, off
			off += int64(len(e.body))
		}
		tree = append(tree, te)
	}
	return tree, done, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// lockedWriter serializes writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
