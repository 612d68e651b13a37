// Package wire defines the JSON exchanged on the internal routes between
// cubemaster and templatecenter, imported by both the servers (tcapi,
// cubeapi) and the clients (tcclient, masterclient) so the two sides cannot
// drift:
//
//   - BuildRequest / BuildAccepted: POST /tc/api/v1/build.
//   - DeleteArtifactRequest / DeleteArtifactResponse: POST /tc/api/v1/artifact/delete.
//   - the upload headers and UploadResponse: POST /tc/api/v1/artifact/upload.
//   - StatusReport: POST /internal/template/jobs/{job_id}/status, with
//     EncodeStatusReport and DecodeStatusReport converting to and from
//     ports.StatusReport.
//   - ErrorBody: {"error": "..."} sent with a real HTTP status on failure.
//
// Internal routes use real HTTP statuses; StatusFor maps core errors to them.
package wire
