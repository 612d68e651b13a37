// Package pipeline orchestrates one rootfs build on the data plane: resolve the
// image to a digest, fingerprint the spec, fetch verified layers, flatten
// them (with injected files as a last layer), stream the tree into an ext4
// builder, hash the result and publish it to the artifact store. Every step
// reports progress, honours cancellation, and scratch space is removed on
// every exit path.
package pipeline
