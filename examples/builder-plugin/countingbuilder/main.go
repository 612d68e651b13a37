// Command countingbuilder is a rootfs builder plugin written for the
// builder-plugin example. It delegates every build to the pure-Go
// ext4stream builder and logs, for each build, how many tar entries and
// content bytes the tree had. The logs travel to the host over the plugin's
// stderr (go-plugin forwards hclog JSON lines to the host's logger).
//
// The host starts it (see ../main.go); run by hand it only explains that.
package main

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/cubesandbox/templatecenter/adapters/builder/pluginproto"
	"github.com/cubesandbox/templatecenter/plugins/ext4stream/ext4build"
	"github.com/cubesandbox/templatecenter/ports"
)

// countingBuilder wraps another ports.RootfsBuilder.
type countingBuilder struct {
	inner ports.RootfsBuilder
	log   hclog.Logger
}

// Name is what the host sees (Builder.Name) and what would go into logs
// and metrics there.
func (b *countingBuilder) Name() string { return "counting-" + b.inner.Name() }

// Format is the inner builder's: counting changes no byte.
func (b *countingBuilder) Format() string { return b.inner.Format() }

// Build counts the tree's entries while the inner builder consumes it: a
// tee hands every byte the inner builder reads to a tar reader running in
// another goroutine, so the tree is still streamed exactly once.
func (b *countingBuilder) Build(ctx context.Context, spec ports.BuildSpec) (ports.BuildResult, error) {
	pr, pw := io.Pipe()
	spec.Tree = io.TeeReader(spec.Tree, pw)
	counted := make(chan ports.TreeStats, 1)
	go func() { counted <- count(pr) }()

	res, err := b.inner.Build(ctx, spec)
	_ = pw.Close() // ends the counter's drain
	c := <-counted
	if err != nil {
		b.log.Warn("build failed", "out", spec.OutPath, "entries_read", c.Entries, "error", err)
		return res, err // the error class (core.ErrUnsupported, ...) crosses the wire intact
	}
	// Sizes as text: hclog's JSON turns numbers into floats on the host.
	b.log.Info("tree streamed", "entries", c.Entries, "content_bytes", c.ContentBytes, "image_bytes", fmt.Sprint(res.SizeBytes))
	return res, nil
}

// count reads tar headers from r and returns the number of entries and
// their content bytes. It drains r to the end whatever happens, so that the
// tee feeding it never blocks the build.
func count(r io.Reader) (c ports.TreeStats) {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err != nil {
			break
		}
		c.Entries++
		c.ContentBytes += hdr.Size
	}
	_, _ = io.Copy(io.Discard, r)
	return c
}

func main() {
	// JSON on stderr: the host parses it and keeps the level and fields.
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: os.Stderr, JSONFormat: true})
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: pluginproto.Handshake,
		Plugins: plugin.PluginSet{
			pluginproto.PluginName: &pluginproto.GRPCPlugin{Impl: &countingBuilder{inner: ext4build.New(), log: logger}},
		},
		GRPCServer: plugin.DefaultGRPCServer,
	})
}
