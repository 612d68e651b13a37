// Package registry implements ports.ImageSource on regclient: it resolves an
// image reference to the manifest digest of one platform and fetches the
// image's layers into the verified layer cache (adapters/layercache).
//
// What it guarantees, and why:
//
//   - References are read in core's grammar (core.ParseImageRef, the one
//     the control plane checks requests with) and handed to regclient
//     already parsed. Only registry references are accepted (ocidir://
//     only with AllowLocalLayouts): a local layout reference would let a
//     caller read files on the server. Digests are validated
//     (sha256/sha512) before they reach a URL or a path. Errors never
//     echo the reference.
//   - Every connection goes through the egress policy (egress.go), checked
//     on the address actually dialled, so redirects and DNS rebinding to
//     link-local or metadata addresses fail.
//   - The tag is resolved to a digest first; the platform manifest, the
//     config and every layer are then fetched by digest and verified
//     against the descriptor taken from the verified manifest, never
//     against Content-Length or Docker-Content-Digest. Streams are read to
//     the end and hashed by us as well as by regclient.
//   - Layers are cached by digest; a missing one is downloaded with
//     bounded concurrency and retried with capped exponential backoff,
//     resuming from the bytes already on disk with a Range request
//     (transport.go explains how this works under regclient). Each
//     layer's DiffID is computed from the decompressed bytes (gzip, zstd
//     or plain) and must equal the config's rootfs.diff_ids entry.
//   - Layers with foreign URLs are refused rather than fetched.
//   - Credentials from the request or a docker config.json are handed to
//     regclient only; they are masked in regclient's log output and in
//     every error this package returns.
package registry
