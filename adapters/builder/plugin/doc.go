// Package plugin runs a rootfs builder out of process: Load starts a
// plugin binary with hashicorp/go-plugin (gRPC only), checks that it speaks
// an API version the host speaks, and returns a ports.RootfsBuilder whose
// builds stream the tree to the plugin. Close kills the plugin process.
//
// With API v2 the tree's tar bytes go through a named pipe beside the
// output (host and plugin share the file system): the kernel copies them
// once into the plugin, with no gRPC framing, protobuf marshalling or
// HTTP/2 flow control in the way; v1 plugins get chunk messages, as does
// every plugin when Options.Chunks is set.
//
// A plugin that hashes the image while writing it says so in its answer
// (BuildResponse.sha256), and the host then does not read the image again:
// the sha256 is the plugin's claim, which the artifact store checks on
// Put before anything is published (ports.ArtifactStore), so a plugin
// that reports a wrong one fails its builds instead of publishing them.
//
// plugins/ext4stream is the builder this project ships this way.
package plugin
