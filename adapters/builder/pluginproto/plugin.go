package pluginproto

import (
	"context"

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

// API versions of the RootfsBuilder service.
const (
	// APIVersion1: PluginInfo + client-streaming Build, the tree in chunk
	// messages.
	APIVersion1 = "v1"
	// APIVersion2: v1, and the tree may come through a named pipe
	// (BuildSpec.tree_fifo) instead: the tar bytes then cross the process
	// boundary through the kernel, with no gRPC framing or copies.
	APIVersion2 = "v2"
	// APIVersion3: v2, and a plugin whose builder is a
	// ports.PlannedBuilder may get the tree as entries (BuildSpec.entries,
	// EntryBatch messages): it reads each file's content from the host's
	// files itself and answers with the image's sha256.
	APIVersion3 = "v3"
)

// APIVersions lists what this package speaks, most preferred first.
var APIVersions = []string{APIVersion3, APIVersion2, APIVersion1}

// ChunkSize is the size of the tree chunks the host sends.
const ChunkSize = 1 << 20

// PluginMap is the plugin map for hosts; plugins build theirs with an Impl.
var PluginMap = map[string]plugin.Plugin{PluginName: &GRPCPlugin{}}

// GRPCPlugin is the go-plugin glue. In the plugin process Impl is the
// builder to serve; on the host it is nil and Dispense returns a *Client.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl ports.RootfsBuilder
	// APIVersions overrides what the plugin reports in PluginInfo; nil
	// means every version this package speaks that Impl can serve (v3
	// only for a ports.PlannedBuilder).
	APIVersions []string
}

// GRPCServer registers the builder service (plugin side).
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	versions := p.APIVersions
	if versions == nil {
		versions = APIVersions
		if _, ok := p.Impl.(ports.PlannedBuilder); !ok {
			versions = []string{APIVersion2, APIVersion1}
		}
	}
	RegisterRootfsBuilderServer(s, &server{impl: p.Impl, versions: versions})
	return nil
}

// GRPCClient returns a *Client (host side).
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &Client{rpc: NewRootfsBuilderClient(c)}, nil
}
