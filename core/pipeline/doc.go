// Package pipeline orchestrates one rootfs build on the data plane: resolve the
// image to a digest, fingerprint the spec, fetch verified layers, flatten
// them (with injected files as a last layer), stream the tree into an ext4
// builder, hash the result and publish it to the artifact store. Every step
// reports progress, honours cancellation, and scratch space is removed on
// every exit path.
//
// What a process killed mid-build leaves is removed by whoever comes next:
// a build's scratch directory and, for a build given an output path, the
// stage directory beside that path where the builder writes (stage.go) are
// held with a flock, which the kernel drops however the process dies, and
// a directory nobody holds is swept once it has been quiet for a while.
package pipeline
