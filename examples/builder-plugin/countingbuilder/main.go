// Command countingbuilder is a rootfs builder plugin written for the
// builder-plugin example. It reads the tree as a tar stream, delegates
// every build to the pure-Go ext4stream builder and logs, for each build,
// how many tar entries and content bytes the tree had. The logs travel to the host over the plugin's
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
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/cubesandbox/templatecenter/adapters/builder/ext4stream"
	"github.com/cubesandbox/templatecenter/adapters/builder/pluginproto"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// countingBuilder is a plugin builder that reads the tree as a tar stream
// (pluginproto.TarBuilder, API v1): the simplest shape for a builder
// written in any language that reads tar. It spools the content to a
// scratch file as it reads, counting entries and bytes, and hands the tree
// to the inner builder as entries.
type countingBuilder struct {
	inner ports.RootfsBuilder
	log   hclog.Logger
}

// Name is what the host sees (Builder.Name) and what would go into logs
// and metrics there.
func (b *countingBuilder) Name() string { return "counting-" + b.inner.Name() }

// Format is the inner builder's: counting changes no byte.
func (b *countingBuilder) Format() string { return b.inner.Format() }

// BuildTar reads the tree once, then builds it.
func (b *countingBuilder) BuildTar(ctx context.Context, spec ports.BuildSpec, tree io.Reader) (ports.BuildResult, error) {
	spool, err := os.CreateTemp(filepath.Dir(spec.OutPath), ".tree-content-*")
	if err != nil {
		return ports.BuildResult{}, err
	}
	defer os.Remove(spool.Name())
	defer spool.Close()
	entries, c, err := readTree(tree, spool)
	if err != nil {
		b.log.Warn("tree refused", "entries_read", c.Entries, "error", err)
		return ports.BuildResult{}, err
	}
	res, err := b.inner.Build(ctx, spec, ports.TreeSlice(entries))
	if err != nil {
		b.log.Warn("build failed", "out", spec.OutPath, "entries", c.Entries, "error", err)
		return res, err // the error class (core.ErrUnsupported, ...) crosses the wire intact
	}
	// Sizes as text: hclog's JSON turns numbers into floats on the host.
	b.log.Info("tree streamed", "entries", c.Entries, "content_bytes", c.ContentBytes, "image_bytes", fmt.Sprint(res.SizeBytes))
	return res, nil
}

// readTree reads the tar stream into entries whose content is spooled to
// spool, counting entries and content bytes.
func readTree(r io.Reader, spool *os.File) ([]ports.TreeEntry, ports.TreeStats, error) {
	var c ports.TreeStats
	var entries []ports.TreeEntry
	var off int64
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return entries, c, nil
		}
		if err != nil {
			return nil, c, fmt.Errorf("read tree: %v: %w", err, core.ErrInvalidArgument)
		}
		e := ports.TreeEntry{Header: hdr}
		if hdr.Typeflag == tar.TypeReg && hdr.Size > 0 {
			n, err := io.Copy(spool, tr)
			if err != nil {
				return nil, c, fmt.Errorf("read tree: %w", err)
			}
			e.File, e.Offset = spool, off
			off += n
		}
		c.Entries++
		c.ContentBytes += hdr.Size
		entries = append(entries, e)
	}
}

func main() {
	// JSON on stderr: the host parses it and keeps the level and fields.
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: os.Stderr, JSONFormat: true})
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: pluginproto.Handshake,
		Plugins: plugin.PluginSet{
			pluginproto.PluginName: &pluginproto.GRPCPlugin{Tar: &countingBuilder{inner: ext4stream.New(), log: logger}},
		},
		GRPCServer: plugin.DefaultGRPCServer,
	})
}
