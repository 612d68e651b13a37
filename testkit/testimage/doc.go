// Package testimage builds OCI test images from tar entries or host
// directories and pushes them to a registry, for integration tests and
// benchmarks that pull from a real registry on loopback.
package testimage
