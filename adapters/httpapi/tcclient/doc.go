// Package tcclient is ports.DataPlane over HTTP: cubemaster's client of
// the templatecenter internal API at $CUBE_TEMPLATE_CENTER_ADDR, sending the
// shared token in X-Cube-Template-Callback-Token.
//
//   - SubmitBuild: POST /tc/api/v1/build. 429 -> core.ErrBusy, 409 ->
//     core.ErrConflict, 404 -> core.ErrNotFound, 400 -> core.ErrInvalidArgument,
//     401 -> wire.ErrUnauthorized, 503 -> wire.ErrUnavailable (all as a
//     *wire.StatusError carrying the TC's message). A submit is not
//     idempotent, so it is retried only when the request provably never left
//     (no connection could be made); an answer, or a connection lost after
//     the request was written, is final and returned.
//   - DeleteArtifact: POST /tc/api/v1/artifact/delete, 30 s per attempt,
//     idempotent, so transport errors, 429 and 5xx are retried.
//   - UploadArtifact: POST /tc/api/v1/artifact/upload (migrate), streaming the
//     ext4 once with "Expect: 100-continue" so a refusal costs no transfer.
package tcclient
