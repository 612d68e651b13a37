package wire

import (
	"encoding/json"
	"errors"
	"net/http"
	"regexp"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Internal route paths.
const (
	PathBuild          = "/tc/api/v1/build"
	PathArtifactDelete = "/tc/api/v1/artifact/delete"
	PathArtifactUpload = "/tc/api/v1/artifact/upload"
	// PathJobStatus is the callback route pattern on cubemaster.
	PathJobStatus = "/internal/template/jobs/{job_id}/status"
)

// JobStatusPath is the callback path for one job.
func JobStatusPath(jobID string) string {
	return "/internal/template/jobs/" + jobID + "/status"
}

// BuildRequest is the body of POST /tc/api/v1/build.
type BuildRequest struct {
	JobID           string                 `json:"job_id"`
	Request         *core.FromImageRequest `json:"request"`
	DownloadBaseURL string                 `json:"download_base_url,omitempty"`
	EnvdSHA256      string                 `json:"envd_sha256,omitempty"`
	// EnvdData is the envd binary; encoding/json sends []byte as base64.
	EnvdData []byte `json:"envd_data,omitempty"`
	// CubeEgressCAPEM is the master's CubeEgress root CA (ours; an
	// upstream template center ignores it and reads its own file).
	CubeEgressCAPEM string `json:"cube_egress_ca_pem,omitempty"`
}

// NewBuildRequest converts the port type to the wire body.
func NewBuildRequest(r ports.BuildRequest) BuildRequest {
	return BuildRequest{JobID: r.JobID, Request: r.Request, DownloadBaseURL: r.DownloadBaseURL,
		EnvdSHA256: r.EnvdSHA256, EnvdData: r.EnvdData, CubeEgressCAPEM: string(r.CubeCA)}
}

// Port converts the wire body to the port type.
func (b BuildRequest) Port() ports.BuildRequest {
	out := ports.BuildRequest{JobID: b.JobID, Request: b.Request, DownloadBaseURL: b.DownloadBaseURL,
		EnvdSHA256: b.EnvdSHA256, EnvdData: b.EnvdData}
	if b.CubeEgressCAPEM != "" {
		out.CubeCA = []byte(b.CubeEgressCAPEM)
	}
	return out
}

// BuildAccepted is the 200 answer to a build submit.
type BuildAccepted struct {
	Status string `json:"status"` // "accepted"
	JobID  string `json:"job_id"`
}

// DeleteArtifactRequest is the body of POST /tc/api/v1/artifact/delete.
type DeleteArtifactRequest struct {
	ArtifactID string `json:"artifact_id"`
}

// DeleteArtifactResponse is its 200 answer.
type DeleteArtifactResponse struct {
	Status     string `json:"status"` // "deleted"
	ArtifactID string `json:"artifact_id"`
}

// Upload contract (POST /tc/api/v1/artifact/upload, cubemaster -> TC, used
// by migrate / tpl merge): the body is the raw ext4, Content-Type
// application/octet-stream; the query names it:
//
//	artifact_id  required, the artifact row's id
//	sha256       required, 64 lowercase hex, the body's sha256
//	size         required unless Content-Length is sent; must agree with it
//
// The TC stores the bytes under the artifact's key only if they match size
// and sha256, then records the new location. Answers: 200 UploadResponse
// (also when identical bytes were already stored), 400 bad parameters or
// content mismatch, 401 token, 404 unknown artifact, 409 bytes with a
// different sha256 already stored or recorded, 413 over the size cap.
const (
	QueryArtifactID = "artifact_id"
	QuerySHA256     = "sha256"
	QuerySize       = "size"
)

// Upstream's master uploads in a second form (its tcclient UploadArtifact):
// multipart/form-data with the field artifact_id first, then the part
// "file"; the bytes are checked against the artifact row, or hashed when
// the row records nothing.

// UploadResponse is the 200 answer to an upload. Ext4Path, Ext4SHA256 and
// Ext4SizeBytes are the fields upstream's master reads (ext4_path is empty
// for remote stores).
type UploadResponse struct {
	Status         string `json:"status"` // "uploaded" or "exists"
	ArtifactID     string `json:"artifact_id"`
	ObjectKey      string `json:"object_key"`
	StorageBackend string `json:"storage_backend"`
	SHA256         string `json:"sha256"`
	SizeBytes      int64  `json:"size_bytes"`
	Ext4Path       string `json:"ext4_path,omitempty"`
	Ext4SHA256     string `json:"ext4_sha256"`
	Ext4SizeBytes  int64  `json:"ext4_size_bytes"`
}

// StatusOK is the callback route's 200 answer; Applied is false for stale
// or duplicate reports, which are acknowledged all the same.
type StatusOK struct {
	Status  string `json:"status"` // "ok"
	Applied bool   `json:"applied"`
}

// ErrorBody is the body of every non-2xx internal answer.
type ErrorBody struct {
	Error string `json:"error"`
}

// WriteJSON sends v with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// WriteError sends {"error": msg} with status.
func WriteError(w http.ResponseWriter, status int, msg string) {
	WriteJSON(w, status, ErrorBody{Error: msg})
}

// StatusFor maps an error to the HTTP status of an internal route:
// invalid argument 400, not found 404, conflict (and attempt in progress,
// invalid transition) 409, busy or locked 429, store not initialized 503,
// anything else 500.
func StatusFor(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, core.ErrStoreNotInitialized):
		return http.StatusServiceUnavailable
	case errors.Is(err, core.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, core.ErrConflict), errors.Is(err, core.ErrAttemptInProgress),
		errors.Is(err, core.ErrInvalidTransition):
		return http.StatusConflict
	case errors.Is(err, core.ErrBusy), errors.Is(err, core.ErrLocked):
		return http.StatusTooManyRequests
	case errors.Is(err, core.ErrInvalidArgument), errors.Is(err, core.ErrTemplateIDRequired),
		errors.Is(err, core.ErrUnsupported):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidateID checks a job or artifact id taken from a request: 1-128
// characters of letters, digits, '.', '_' and '-', not starting with a
// symbol. Ids become store keys and log fields, so nothing else is allowed.
func ValidateID(field, id string) error {
	if id == "" {
		return &core.FieldError{Field: field, Reason: "is required"}
	}
	if !idPattern.MatchString(id) {
		return &core.FieldError{Field: field, Reason: "must be 1-128 letters, digits, '.', '_' or '-'"}
	}
	return nil
}
