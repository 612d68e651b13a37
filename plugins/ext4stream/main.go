// Command ext4stream is a rootfs builder plugin: a pure-Go, streaming
// tar → ext4 converter (package ext4build) served over hashicorp/go-plugin
// gRPC. It needs no root, no mount and no e2fsprogs. The host starts it with
// adapters/builder/plugin.Load; run by hand it only explains that.
package main

import (
	"github.com/hashicorp/go-plugin"

	"github.com/cubesandbox/templatecenter/adapters/builder/pluginproto"
	"github.com/cubesandbox/templatecenter/plugins/ext4stream/ext4build"
)

func main() {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: pluginproto.Handshake,
		Plugins: plugin.PluginSet{
			pluginproto.PluginName: &pluginproto.GRPCPlugin{Impl: ext4build.New()},
		},
		GRPCServer: plugin.DefaultGRPCServer,
	})
}
