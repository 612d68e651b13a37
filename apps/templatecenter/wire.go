package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/samber/do/v2"

	"github.com/cubesandbox/templatecenter/adapters/builder/mkfs"
	"github.com/cubesandbox/templatecenter/adapters/builder/plugin"
	"github.com/cubesandbox/templatecenter/adapters/layercache"
	"github.com/cubesandbox/templatecenter/adapters/layers"
	"github.com/cubesandbox/templatecenter/adapters/registry"
	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/core/pipeline"
	"github.com/cubesandbox/templatecenter/plugins/ext4stream/ext4build"
	"github.com/cubesandbox/templatecenter/ports"
)

// buildWiring is what a one-shot build needs beyond the config.
type buildWiring struct {
	cfg      config.Config
	ctx      context.Context
	builder  string
	insecure []string
	// longLived (serve): decoded layers kept in the layer cache are
	// fsynced in the background so that they survive a reboot; a one-shot
	// build leaves that out (its exit would wait for the fsync).
	longLived bool
}

// pluginBuilder adapts the plugin host to do's shutdown hook.
type pluginBuilder struct{ *plugin.Builder }

func (p pluginBuilder) Shutdown() error { return p.Close() }

// newBuildInjector wires the build pipeline's adapters with samber/do.
func newBuildInjector(w buildWiring) *do.RootScope {
	i := do.New()
	do.ProvideValue(i, w.cfg)
	do.Provide(i, func(do.Injector) (*layercache.Cache, error) {
		dir := w.cfg.LayerCacheDir
		if dir == "" {
			dir = filepath.Join(w.cfg.WorkDir, "cube-layer-cache")
		}
		c, err := layercache.Open(dir, w.cfg.LayerCacheMaxBytes)
		if err == nil && w.longLived {
			go syncDerived(w.ctx, c)
		}
		return c, err
	})
	do.Provide(i, func(i do.Injector) (ports.ImageSource, error) {
		cache, err := do.Invoke[*layercache.Cache](i)
		if err != nil {
			return nil, err
		}
		return registry.New(registry.Options{
			Cache:             cache,
			InsecureHosts:     append(append([]string(nil), w.cfg.InsecureRegistries...), w.insecure...),
			AllowLocalLayouts: w.cfg.AllowLocalLayouts,
			DockerConfigPath:  dockerConfigPath(),
			Egress: registry.EgressPolicy{
				AllowPrivate:  w.cfg.RegistryAllowPrivate,
				AllowLoopback: w.cfg.RegistryAllowLoopback,
				TrustedHosts:  w.cfg.TrustedRegistries,
			},
		})
	})
	do.Provide(i, func(do.Injector) (ports.TreeFlattener, error) {
		return layers.Flattener{Limits: layers.DefaultLimits()}, nil
	})
	do.Provide(i, func(do.Injector) (ports.RootfsBuilder, error) {
		name := w.builder
		if name == "" {
			name = w.cfg.Builder
		}
		// Built-in builders run in this process; any other name, or
		// "plugin:<name>", is a plugin binary (plugin:ext4stream runs the
		// ext4stream builder out of process).
		switch name {
		case "mkfs":
			// Stage on tmpfs when there is room for a large image.
			return mkfs.New(mkfs.Options{WorkDir: mkfs.FastWorkDir(w.cfg.WorkDir, 8<<30)}), nil
		case ext4build.Name:
			return ext4build.New(), nil
		}
		name = strings.TrimPrefix(name, "plugin:")
		path, err := pluginPath(w.cfg.PluginDir, name)
		if err != nil {
			return nil, err
		}
		// CUBE_TEMPLATE_CENTER_PLUGIN_TREE=chunks sends the tree in gRPC
		// messages instead of a named pipe (the benchmark compares both).
		b, err := plugin.Load(w.ctx, path, plugin.Options{Chunks: os.Getenv("CUBE_TEMPLATE_CENTER_PLUGIN_TREE") == "chunks"})
		if err != nil {
			return nil, fmt.Errorf("load builder plugin %s: %w", name, err)
		}
		return pluginBuilder{b}, nil
	})
	do.Provide(i, func(i do.Injector) (*pipeline.Pipeline, error) {
		src, err := do.Invoke[ports.ImageSource](i)
		if err != nil {
			return nil, err
		}
		fl, err := do.Invoke[ports.TreeFlattener](i)
		if err != nil {
			return nil, err
		}
		b, err := do.Invoke[ports.RootfsBuilder](i)
		if err != nil {
			return nil, err
		}
		return &pipeline.Pipeline{
			Source: src, Flattener: fl, Builder: b, ScratchDir: w.cfg.WorkDir,
			HeadroomBytes: w.cfg.HeadroomBytes, HeadroomInodes: w.cfg.HeadroomInodes, MaxSizeBytes: w.cfg.MaxImageBytes,
		}, nil
	})
	return i
}

// syncDerived makes decoded layers durable now and then, off the builds'
// path.
func syncDerived(ctx context.Context, c *layercache.Cache) {
	t := time.NewTicker(2 * time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = c.SyncDerived(ctx)
		}
	}
}

// pluginPath finds a builder plugin binary: in the configured plugin dir,
// else next to this executable.
func pluginPath(dir, name string) (string, error) {
	if filepath.Base(name) != name || name == "." || name == ".." {
		return "", fmt.Errorf("builder %q: a plugin is named by its file name in the plugin directory", name)
	}
	if dir == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", err
		}
		dir = filepath.Dir(exe)
	}
	p := filepath.Join(dir, name)
	if st, err := os.Stat(p); err != nil || st.IsDir() {
		return "", fmt.Errorf("builder %q: no plugin binary at %s (set CUBE_TEMPLATE_CENTER_PLUGIN_DIR)", name, p)
	}
	return p, nil
}

func dockerConfigPath() string {
	if d := os.Getenv("DOCKER_CONFIG"); d != "" {
		return filepath.Join(d, "config.json")
	}
	if h, err := os.UserHomeDir(); err == nil {
		p := filepath.Join(h, ".docker", "config.json")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}
