// Package dataplanetest is the conformance suite every ports.DataPlane
// runs, against a data plane the harness serves.
//
//   - SubmitBuild hands the request over intact (job id, request, download
//     base URL, envd checksum and bytes); at capacity it is an error
//     wrapping core.ErrBusy, for a job already in flight one wrapping
//     core.ErrConflict (also at capacity), and in neither case does the
//     data plane take the build.
//   - Ids outside the documented alphabet (empty, "..", with a slash, a
//     space or a newline, starting with '-', over 128 characters) are
//     refused by SubmitBuild, DeleteArtifact and UploadArtifact with an
//     error wrapping core.ErrInvalidArgument before any request is made.
//   - DeleteArtifact removes the artifact's bytes and row and is
//     idempotent: deleting it again, or an artifact that never existed,
//     succeeds.
//   - ArtifactExists is true when the bytes are served (the way nodes
//     download them), false when the data plane answers that they are
//     absent (no row, no bytes), and an error, never a guess, for any other
//     answer (a wrong download token). Rows that are not READY are reported
//     present without asking; a READY row without a download token is an
//     error wrapping core.ErrInvalidArgument, also without asking.
//   - UploadArtifact stores verified bytes and returns where they are
//     stored; an identical second upload is answered as done; a wrong
//     sha256, a body shorter or longer than the declared size, and bytes
//     that differ from what the artifact records are errors wrapping
//     core.ErrInvalidArgument or core.ErrConflict that leave nothing
//     stored (and the earlier bytes untouched).
//
// No error of any method contains a secret: the client's own token, a
// download token or a registry password.
//
// The suite checks the client against a data plane it can observe; it does
// not test the data plane's build executor, which the harness may replace
// with one that only records builds and enforces its capacity.
package dataplanetest
