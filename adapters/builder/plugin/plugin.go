package plugin

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/cubesandbox/templatecenter/adapters/builder/pluginproto"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Options tune Load. The zero value is usable.
type Options struct {
	// SHA256 is the expected sha256 of the plugin binary. When set, a
	// binary with another checksum is refused before it runs.
	SHA256 []byte
	// Args are passed to the plugin binary.
	Args []string
	// Env is added to the plugin's environment (which otherwise is the
	// host's).
	Env []string
	// StartTimeout bounds the handshake; 0 means 1 minute, or less if ctx
	// has an earlier deadline.
	StartTimeout time.Duration
	// Logger receives go-plugin's and the plugin's log lines; nil means
	// warnings and errors on stderr.
	Logger hclog.Logger
}

// Builder is a ports.RootfsBuilder served by a plugin process.
type Builder struct {
	client *goplugin.Client
	rpc    *pluginproto.Client
	name   string
	format string
	api    string
}

var _ ports.RootfsBuilder = (*Builder)(nil)

// Load starts the plugin at path and negotiates the API version. The
// caller must Close the Builder. Errors wrap core.ErrUnsupported when the
// plugin speaks no API version the host speaks.
func Load(ctx context.Context, path string, opts Options) (*Builder, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("builder plugin %s: %w", path, err)
	}
	logger := opts.Logger
	if logger == nil {
		logger = hclog.New(&hclog.LoggerOptions{Name: "builder-plugin", Level: hclog.Warn, Output: os.Stderr})
	}
	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl)
	}
	cmd := exec.Command(path, opts.Args...)
	// Host environment first so that opts.Env wins; go-plugin then only
	// adds its own variables.
	cmd.Env = append(os.Environ(), opts.Env...)
	diesWithHost(cmd)
	cfg := &goplugin.ClientConfig{
		HandshakeConfig:  pluginproto.Handshake,
		Plugins:          pluginproto.PluginMap,
		Cmd:              cmd,
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		SkipHostEnv:      true,
		Managed:          true,
		StartTimeout:     timeout,
		Logger:           logger,
	}
	if len(opts.SHA256) > 0 {
		cfg.SecureConfig = &goplugin.SecureConfig{Checksum: opts.SHA256, Hash: sha256.New()}
	}
	client := goplugin.NewClient(cfg)
	b, err := handshake(ctx, client)
	if err != nil {
		client.Kill()
		return nil, fmt.Errorf("builder plugin %s: %w", path, err)
	}
	return b, nil
}

func handshake(ctx context.Context, client *goplugin.Client) (*Builder, error) {
	proto, err := client.Client()
	if err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	raw, err := proto.Dispense(pluginproto.PluginName)
	if err != nil {
		return nil, fmt.Errorf("dispense: %w", err)
	}
	rpc, ok := raw.(*pluginproto.Client)
	if !ok {
		return nil, fmt.Errorf("dispense returned %T", raw)
	}
	info, err := rpc.PluginInfo(ctx)
	if err != nil {
		return nil, fmt.Errorf("plugin info: %w", err)
	}
	api := negotiate(pluginproto.APIVersions, info.APIVersions)
	if api == "" {
		return nil, fmt.Errorf("plugin %q speaks API versions %v, the host speaks %v (rebuild the plugin against this pluginproto): %w",
			info.Name, info.APIVersions, pluginproto.APIVersions, core.ErrUnsupported)
	}
	if info.Name == "" {
		return nil, errors.New("plugin reports an empty name")
	}
	format := info.Format
	if format == "" {
		// A plugin that does not say: its name and API version are all
		// that is known about its output.
		format = info.Name + "/api-" + api
	}
	return &Builder{client: client, rpc: rpc, name: info.Name, format: format, api: api}, nil
}

// negotiate returns the host's most preferred version the plugin also
// speaks, or "".
func negotiate(host, plugin []string) string {
	for _, v := range host {
		if slices.Contains(plugin, v) {
			return v
		}
	}
	return ""
}

// Name is the name the plugin reported.
func (b *Builder) Name() string { return b.name }

// Format is the output format the plugin reported (ports.RootfsBuilder).
func (b *Builder) Format() string { return b.format }

// APIVersion is the negotiated API version.
func (b *Builder) APIVersion() string { return b.api }

// Build implements ports.RootfsBuilder: the plugin gets the tree as
// entries whose content it reads from the host's files in place (API v3),
// lays the image out first and hashes it as it writes it; a plugin that
// reads only tar (API v1) gets the tree's tar stream. The sha256 a plugin
// reports is taken as an in-process builder's is: the artifact store holds
// it to the bytes again before anything is published; a build without a
// store (the one-shot CLI) reports it as the plugin computed it. The
// plugin writes in a directory of the host's beside spec.OutPath
// (staged), so nothing it writes outlives a failed build, even one whose
// plugin process was killed.
func (b *Builder) Build(ctx context.Context, spec ports.BuildSpec, tree ports.Tree) (ports.BuildResult, error) {
	res, err := staged(spec, func(spec ports.BuildSpec) (ports.BuildResult, error) {
		return b.rpc.Build(ctx, b.api, spec, tree)
	})
	if err != nil {
		return res, fmt.Errorf("builder plugin %s: %w", b.name, err)
	}
	return res, nil
}

// Exited reports whether the plugin process has exited.
func (b *Builder) Exited() bool { return b.client.Exited() }

// Close kills the plugin process. Builds in flight fail.
func (b *Builder) Close() error {
	b.client.Kill()
	return nil
}
