// Package artifactstore implements ports.ArtifactStore on a local directory
// (file://), S3 or an S3-compatible server such as MinIO (s3://), Google Cloud
// Storage (gs://) and memory (mem://).
//
// Each kind declares itself as a Scheme (its URL scheme, whether its bytes
// are remote, how its URLs parse) beside its code, and Register makes it
// known to Open, in gocloud's URLMux shape: a new backend is a Driver and
// a Scheme in its own file or package plus one Register line, and
// everything that names store kinds (Store.Backend, the data plane's
// settings and scrub rule, the conformance suite) follows.
//
// Every backend verifies size and sha256 while the bytes stream in and
// publishes an object only when both match, so a caller that writes metadata
// rows after Put returns never points at partial or wrong bytes. S3, GCS and
// memory use gocloud.dev/blob: a bad write is aborted by cancelling the
// writer's context before Close, and on S3 a multipart upload the failure
// left open is aborted explicitly (the SDK's own abort runs on the cancelled
// context and fails). The local directory is written by this
// package itself (temp file in the same directory, fsync, rename, fsync of
// the directory) because gocloud's fileblob never fsyncs; the sha256 travels
// with the file as the extended attribute user.cube.sha256, set before the
// rename, so bytes and checksum become visible together. Temp files a
// killed process left behind are removed when a file store opens while no
// other store has the directory open (a shared flock on it tells).
//
// Credentials never appear in URLs: s3:// takes them from the standard AWS
// chain (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, shared config), OpenS3 from
// S3Config, and error messages name a URL only without its query and user
// info.
package artifactstore
