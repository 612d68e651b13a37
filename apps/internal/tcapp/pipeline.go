package tcapp

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/samber/do/v2"

	"github.com/cubesandbox/templatecenter/adapters/builder/ext4stream"
	"github.com/cubesandbox/templatecenter/adapters/builder/mkfs"
	"github.com/cubesandbox/templatecenter/adapters/builder/plugin"
	"github.com/cubesandbox/templatecenter/adapters/layercache"
	"github.com/cubesandbox/templatecenter/adapters/layers"
	"github.com/cubesandbox/templatecenter/adapters/registry"
	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/apps/internal/startup"
	"github.com/cubesandbox/templatecenter/core/pipeline"
	"github.com/cubesandbox/templatecenter/ports"
)

// Options are what the data plane needs beyond its configuration.
type Options struct {
	Config config.Config
	Logger *slog.Logger
	// Builder overrides Config.Builder (the one-shot --builder flag).
	Builder string
	// InsecureRegistries and TrustedRegistries add to the configured
	// lists (--insecure-registry, --allow-registry).
	InsecureRegistries []string
	TrustedRegistries  []string

	// Parts opened elsewhere (dev mode); nil opens them from Config.
	Store         *entstore.Store
	Locker        ports.Locker
	Progress      ports.ProgressSink
	RootfsBuilder ports.RootfsBuilder
	// RegistryObserver, when set, is told of layer cache lookups and
	// pulled bytes (the service passes its metrics).
	RegistryObserver registry.Observer
	// ServerTimeouts bound slow clients of the HTTP server (zero fields:
	// startup.DefaultServerTimeouts).
	ServerTimeouts startup.ServerTimeouts
	// LongLived (serve): decoded layers kept in the layer cache are
	// fsynced in the background so that they survive a reboot; a one-shot
	// build leaves that out (its exit would wait for the fsync).
	LongLived bool
	// Instance is the data-plane process's instance id (core/liveness);
	// Run mints one when it is empty.
	Instance string
}

func (o Options) log() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// insecure and trusted are the registry lists with the flags added.
func (o Options) insecure() []string {
	return append(append([]string(nil), o.Config.InsecureRegistries...), o.InsecureRegistries...)
}

func (o Options) trusted() []string {
	return append(append([]string(nil), o.Config.TrustedRegistries...), o.TrustedRegistries...)
}

// pluginBuilder adapts the plugin host to do's shutdown hook.
type pluginBuilder struct{ *plugin.Builder }

func (p pluginBuilder) Shutdown() error { return p.Close() }

// NewBuildInjector wires the build pipeline's adapters. ctx bounds the
// start of a builder plugin.
func NewBuildInjector(ctx context.Context, o Options) *do.RootScope {
	cfg := o.Config
	i := do.New()
	do.ProvideValue(i, cfg)
	do.Provide(i, func(do.Injector) (*layercache.Cache, error) {
		dir := cfg.LayerCacheDir
		if dir == "" {
			dir = filepath.Join(cfg.WorkDir, "layer-cache")
		}
		c, err := layercache.Open(dir, cfg.LayerCacheMaxBytes)
		if err != nil {
			return nil, fmt.Errorf("layer cache %s (CUBE_TEMPLATE_CENTER_LAYER_CACHE_DIR): %w", dir, err)
		}
		if o.LongLived {
			go maintainCache(ctx, c)
		}
		return c, nil
	})
	do.Provide(i, func(i do.Injector) (ports.ImageSource, error) {
		cache, err := do.Invoke[*layercache.Cache](i)
		if err != nil {
			return nil, err
		}
		src, err := registry.New(registry.Options{
			Cache:             cache,
			InsecureHosts:     o.insecure(),
			AllowLocalLayouts: cfg.AllowLocalLayouts,
			DockerConfigPath:  dockerConfigPath(),
			IdleTimeout:       cfg.RegistryTimeout,
			Egress: registry.EgressPolicy{
				AllowPrivate:  cfg.RegistryAllowPrivate,
				AllowLoopback: cfg.RegistryAllowLoopback,
				TrustedHosts:  o.trusted(),
			},
			Observer: o.RegistryObserver,
		})
		if err != nil {
			return nil, err
		}
		return explainSource(src, cfg.RegistryTimeout), nil
	})
	do.Provide(i, func(do.Injector) (ports.TreeFlattener, error) {
		g, err := GzipDecoder(cfg.GzipDecoder)
		if err != nil {
			return nil, err
		}
		return layers.Flattener{Limits: layers.DefaultLimits(), Gunzip: g}, nil
	})
	do.Provide(i, func(do.Injector) (ports.RootfsBuilder, error) {
		if o.RootfsBuilder != nil {
			return o.RootfsBuilder, nil
		}
		name := o.Builder
		if name == "" {
			name = cfg.Builder
		}
		// Built-in builders run in this process; any other name, or
		// "plugin:<name>", is a plugin binary (plugin:ext4stream runs the
		// ext4stream builder out of process).
		switch name {
		case "mkfs":
			// Stage on tmpfs when there is room for a large image.
			return mkfs.New(mkfs.Options{WorkDir: mkfs.FastWorkDir(cfg.WorkDir, 8<<30)}), nil
		case ext4stream.Name:
			return ext4stream.New(), nil
		}
		name = strings.TrimPrefix(name, "plugin:")
		path, err := pluginPath(cfg.PluginDir, name)
		if err != nil {
			return nil, err
		}
		b, err := plugin.Load(ctx, path, plugin.Options{})
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
			Source: src, Flattener: fl, Builder: b, ScratchDir: cfg.WorkDir,
			HeadroomBytes: cfg.HeadroomBytes, HeadroomInodes: cfg.HeadroomInodes, MaxSizeBytes: cfg.MaxImageBytes,
		}, nil
	})
	return i
}

// maintainCache makes decoded layers durable now and then, off the
// builds' path, and drops partial downloads abandoned for a day (a
// serving process never reopens its cache, where that happens too).
func maintainCache(ctx context.Context, c *layercache.Cache) {
	t := time.NewTicker(2 * time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			maintainCacheOnce(ctx, c)
		}
	}
}

func maintainCacheOnce(ctx context.Context, c *layercache.Cache) {
	_ = c.SyncDerived(ctx)
	c.SweepTemp()
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
		return "", fmt.Errorf("builder %q: no plugin binary at %s (set CUBE_TEMPLATE_CENTER_PLUGIN_DIR, or CUBE_TEMPLATE_CENTER_BUILDER=ext4stream)", name, p)
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

// GzipDecoder resolves CUBE_TEMPLATE_CENTER_GZIP_DECODER: nil is the
// built-in decoder. A path must name a program anyone may run: run as
// root, the data plane starts it as nobody.
func GzipDecoder(setting string) (*layers.GzipProgram, error) {
	switch setting {
	case "", "auto":
		// A program that fails its check leaves builds to the built-in
		// decoder (the startup log names the decoder in use).
		if p := layers.LookGzipProgram("igzip"); p != nil && p.Check() == nil {
			return p, nil
		}
		return nil, nil
	case "builtin":
		return nil, nil
	}
	st, err := os.Stat(setting)
	if err != nil {
		return nil, fmt.Errorf("CUBE_TEMPLATE_CENTER_GZIP_DECODER: %w (install igzip, Debian package isal, or set builtin)", err)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o001 == 0 {
		return nil, fmt.Errorf("CUBE_TEMPLATE_CENTER_GZIP_DECODER: %s is not a program anyone may run (mode %s)", setting, st.Mode())
	}
	p := &layers.GzipProgram{Path: setting}
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("CUBE_TEMPLATE_CENTER_GZIP_DECODER: %w", err)
	}
	return p, nil
}
