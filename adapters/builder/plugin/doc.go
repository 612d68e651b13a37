// Package plugin runs a rootfs builder out of process: Load starts a
// plugin binary with hashicorp/go-plugin (gRPC only), checks that it speaks
// an API version the host speaks, and returns a ports.RootfsBuilder whose
// builds stream the tree to the plugin. Close kills the plugin process.
//
// plugins/ext4stream is the builder this project ships this way.
package plugin
