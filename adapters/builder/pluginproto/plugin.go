package pluginproto

import (
	"context"
	"errors"
	"io"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/cubesandbox/templatecenter/ports"
)

// Handshake is the go-plugin handshake. The cookie only keeps people from
// running a plugin binary by hand; it is not a security measure. Never
// change these values: evolve the API through APIVersions instead.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "CUBE_ROOTFS_BUILDER_PLUGIN",
	MagicCookieValue: "5b0e7c1e-2f4a-4d8b-9a63-0c7d5e1f8a42",
}

// PluginName is the key of the builder in plugin maps.
const PluginName = "rootfs_builder"

// API versions of the RootfsBuilder service. A plugin lists what it
// speaks, the host picks the first of APIVersions the plugin also speaks;
// a plugin speaking none of them is refused at load with both lists named.
const (
	// APIVersionTar: PluginInfo + client-streaming Build, the tree as a
	// tar stream in chunk messages (TarBuilder).
	APIVersionTar = "v1"
	// APIVersionEntries: the tree as entries (EntryBatch messages) whose
	// content the plugin reads from the host's files in place; the
	// answer carries the sha256 the plugin computed as it wrote the image
	// (a ports.RootfsBuilder). "v2", a tar stream through a named pipe,
	// is no longer spoken.
	APIVersionEntries = "v3"
)

// APIVersions lists what this package speaks, most preferred first.
var APIVersions = []string{APIVersionEntries, APIVersionTar}

// ChunkSize is the size of the tree chunks the host sends.
const ChunkSize = 1 << 20

// PluginMap is the plugin map for hosts; plugins build theirs with an Impl.
var PluginMap = map[string]plugin.Plugin{PluginName: &GRPCPlugin{}}

// TarBuilder is a builder that reads the tree as a tar stream
// (APIVersionTar): the tree's entries as tar headers, each regular file's
// content after its header, ending with the end-of-archive marker. The
// example plugin is one; ports.RootfsBuilder is the faster shape.
type TarBuilder interface {
	Name() string
	Format() string
	// BuildTar is ports.RootfsBuilder.Build with the tree as tar.
	BuildTar(ctx context.Context, spec ports.BuildSpec, tree io.Reader) (ports.BuildResult, error)
}

// GRPCPlugin is the go-plugin glue. In the plugin process exactly one of
// Impl (served with APIVersionEntries) and Tar (served with APIVersionTar)
// is the builder to serve; on the host both are nil and Dispense returns
// a *Client.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl ports.RootfsBuilder
	Tar  TarBuilder
	// APIVersions overrides what the plugin reports in PluginInfo (a
	// plugin of another version, in tests); nil means the version of the
	// builder it serves.
	APIVersions []string
}

// GRPCServer registers the builder service (plugin side).
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	srv := &server{impl: p.Impl, tar: p.Tar}
	switch {
	case p.Impl != nil && p.Tar != nil:
		return errors.New("pluginproto: GRPCPlugin serves one builder: set Impl or Tar, not both")
	case p.Impl != nil:
		srv.versions, srv.name, srv.format = []string{APIVersionEntries}, p.Impl.Name(), p.Impl.Format()
	case p.Tar != nil:
		srv.versions, srv.name, srv.format = []string{APIVersionTar}, p.Tar.Name(), p.Tar.Format()
	default:
		return errors.New("pluginproto: GRPCPlugin has no builder to serve")
	}
	if p.APIVersions != nil {
		srv.versions = p.APIVersions
	}
	RegisterRootfsBuilderServer(s, srv)
	return nil
}

// GRPCClient returns a *Client (host side).
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &Client{rpc: NewRootfsBuilderClient(c)}, nil
}
