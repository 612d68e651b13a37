// Package plugin runs a rootfs builder out of process: Load starts a
// plugin binary with hashicorp/go-plugin (gRPC only), checks that it speaks
// an API version the host speaks (a plugin that does not is refused with
// both lists named), and returns a ports.RootfsBuilder that hands the tree
// to the plugin. Close kills the plugin process.
//
// With API v3, a plugin that builds from entries gets the flattened tree's
// headers and, for each file, where its content lies in the host's spool
// and layer files, which it opens through /proc and reads in place: no
// content byte is copied through the host, and the plugin hashes the image
// as it writes it, so the host reads nothing back. A plugin that only
// reads tar (API v1) gets the tree's tar stream, written from the entries
// as it is sent, in gRPC messages.
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
