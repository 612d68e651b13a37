// Package plugin runs a rootfs builder out of process: Load starts a
// plugin binary with hashicorp/go-plugin (gRPC only), checks that it speaks
// an API version the host speaks, and returns a ports.RootfsBuilder whose
// builds stream the tree to the plugin. Close kills the plugin process.
//
// With API v3, a plugin that builds from entries (Builder.Planned) gets the
// flattened tree's headers and, for each file, where its content lies in
// the host's spool and layer files, which it opens through /proc and reads
// in place: no content byte is copied through the host, and the plugin
// hashes the image as it writes it, so the host reads nothing back. With
// API v2 the tree's tar bytes go through a named pipe beside the
// output (host and plugin share the file system): the kernel copies them
// once into the plugin, with no gRPC framing, protobuf marshalling or
// HTTP/2 flow control in the way; v1 plugins get chunk messages, as does
// every plugin when Options.Chunks is set.
//
// The plugin never writes beside the output itself: the host makes a
// directory of its own there (StagePrefix), hands the plugin a path inside
// it and moves the finished image out. Whatever the plugin leaves there
// (its temporary image, when it fails, is cancelled or is killed before it
// can clean up) goes with the directory; a host that died mid-build leaves
// the directory unlocked, and the next build beside that output removes it.
//
// plugins/ext4stream is the builder this project ships this way.
package plugin
