// Command ext4stream is a rootfs builder plugin: the pure-Go ext4 writer
// of adapters/builder/ext4stream served over hashicorp/go-plugin gRPC (API
// v3: the tree's content is read in place from the host's files). It needs no root, no mount and no e2fsprogs. The host starts it with
// adapters/builder/plugin.Load; run by hand it only explains that.
package main

import (
	"github.com/hashicorp/go-plugin"

	"github.com/cubesandbox/templatecenter/adapters/builder/ext4stream"
	"github.com/cubesandbox/templatecenter/adapters/builder/pluginproto"
)

func main() {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: pluginproto.Handshake,
		Plugins: plugin.PluginSet{
			pluginproto.PluginName: &pluginproto.GRPCPlugin{Impl: ext4stream.New()},
		},
		GRPCServer: plugin.DefaultGRPCServer,
	})
}
