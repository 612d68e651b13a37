// Package artifactstoretest is the conformance suite every ports.ArtifactStore
// adapter runs: put, stat and full or ranged reads; verification of size and
// sha256 with nothing published on a mismatch, a failing reader or a
// cancelled context (and an existing object left untouched); overwrites;
// concurrent writers of one key and of many keys; idempotent delete;
// not-found errors; invalid keys and expectations; the empty object; a 40 MiB
// object that takes the multipart path; and signed URLs (a plain and a Range
// GET over HTTP where supported, core.ErrUnsupported elsewhere).
//
// Beyond the port's doc comments the suite pins two edge cases so every
// adapter agrees: Open at offset == size yields an empty reader, and an
// offset past the end is an error wrapping core.ErrInvalidArgument.
//
// Adapters run it through a Harness (the gocloud drivertest shape); a
// harness for an emulator may also implement SignedURLClient so that the
// signed URLs it mints for the real service reach the emulator.
package artifactstoretest
