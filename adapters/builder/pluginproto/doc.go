// Package pluginproto is what both sides of an out-of-process rootfs
// builder share, in the shape of go-plugin's examples/grpc/shared: the
// handshake, the plugin map, the gRPC service (builder.proto; the generated
// code is committed) and the glue that serves a ports.RootfsBuilder in the
// plugin process and makes it look local on the host.
//
// Versioning follows Nomad: the go-plugin handshake stays at protocol 1
// with a fixed cookie, and the application API is negotiated per plugin:
// PluginInfo lists the API versions the plugin speaks, the host picks one
// it also speaks and sends it with every build.
//
// A build is one client-streaming call. The first message carries the
// spec, the following ones the tree. With APIVersionEntries, offered by a
// plugin whose builder is a ports.RootfsBuilder (GRPCPlugin.Impl),
// EntryBatch messages carry the tar headers, each file's zero blocks and
// where its content lies in a file the host holds open, which the plugin
// opens as /proc/<host pid>/fd/<fd> and reads in place; the answer carries
// the sha256 the plugin computed as it wrote the image. With
// APIVersionTar, for a plugin that only reads tar (GRPCPlugin.Tar, a
// TarBuilder), chunk messages carry the tree's tar stream, which the host
// writes from the entries (WriteTar) as it sends them. The plugin writes
// the image at the spec's OutPath, which host and plugin see alike. Error
// classes (core.ErrInvalidArgument, core.ErrUnsupported, ...) and context
// cancellation cross the wire as gRPC status codes.
package pluginproto
