// Package legacyartifactstest is the conformance suite every
// ports.LegacyArtifacts runs.
//
// Open returns the bytes and size of a copy inside a configured root. A
// missing copy, an empty path, a relative path, a path outside every root
// and a path whose ".." climbs out of its root are errors wrapping
// core.ErrNotFound; a symbolic link inside a root that leads outside (to a
// file, or as a directory on the way) and a directory are errors too, of
// any kind. No refused Open returns a reader, so the bytes outside are
// never served.
//
// Remove deletes a copy inside a root (and nothing next to it), and leaves
// alone, without an error, a missing copy, a path outside every root, a
// ".." path climbing out, a relative path, and a copy whose StorageBackend
// is "file", "local" or "" (it may be the store's own object). Through a
// link leading outside it removes nothing outside; it may refuse with an
// error.
package legacyartifactstest
