package tcapi

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/envelope"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/core"
)

// decodeInternal reads a JSON body for an internal route, answering 400 or
// 413 itself on failure.
func (s *server) decodeInternal(w http.ResponseWriter, r *http.Request, limit int64, dst any) bool {
	err := envelope.Decode(w, r, limit, dst)
	if err == nil {
		return true
	}
	status := http.StatusBadRequest
	var de *envelope.DecodeError
	if errors.As(err, &de) && de.TooLarge {
		status = http.StatusRequestEntityTooLarge
	}
	wire.WriteError(w, status, err.Error())
	return false
}

// build is POST /tc/api/v1/build.
func (s *server) build(w http.ResponseWriter, r *http.Request) {
	var body wire.BuildRequest
	if !s.decodeInternal(w, r, s.cfg.MaxBuildBodyBytes, &body) {
		return
	}
	if err := validateBuild(&body); err != nil {
		wire.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if s.cfg.Builds == nil {
		wire.WriteError(w, http.StatusServiceUnavailable, "no build executor on this template center")
		return
	}
	if err := s.cfg.Builds.Submit(r.Context(), body.Port()); err != nil {
		s.internalError(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, wire.BuildAccepted{Status: "accepted", JobID: body.JobID})
}

func validateBuild(b *wire.BuildRequest) error {
	if err := wire.ValidateID("job_id", b.JobID); err != nil {
		return err
	}
	if b.Request == nil {
		return &core.FieldError{Field: "request", Reason: "is required"}
	}
	if b.CubeEgressCAPEM != "" {
		if _, err := core.ParseCubeCA([]byte(b.CubeEgressCAPEM)); err != nil {
			return err
		}
	}
	if b.EnvdSHA256 == "" {
		return nil
	}
	b.EnvdSHA256 = strings.ToLower(b.EnvdSHA256)
	if !isSHA256Hex(b.EnvdSHA256) {
		return &core.FieldError{Field: "envd_sha256", Reason: "must be 64 hex characters"}
	}
	// A payload damaged on the way would be baked into every sandbox of
	// the template; refuse it here, before a build starts.
	if len(b.EnvdData) > 0 {
		sum := sha256.Sum256(b.EnvdData)
		if hex.EncodeToString(sum[:]) != b.EnvdSHA256 {
			return &core.FieldError{Field: "envd_data", Reason: "sha256 does not match envd_sha256"}
		}
	}
	return nil
}

// deleteArtifact is POST /tc/api/v1/artifact/delete; deleting a missing
// artifact succeeds.
func (s *server) deleteArtifact(w http.ResponseWriter, r *http.Request) {
	var body wire.DeleteArtifactRequest
	if !s.decodeInternal(w, r, s.cfg.MaxBodyBytes, &body) {
		return
	}
	if err := wire.ValidateID("artifact_id", body.ArtifactID); err != nil {
		wire.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if s.cfg.Deleter == nil {
		wire.WriteError(w, http.StatusServiceUnavailable, "artifact deletion is not configured on this template center")
		return
	}
	if err := s.cfg.Deleter.DeleteArtifact(r.Context(), body.ArtifactID); err != nil && !errors.Is(err, core.ErrNotFound) {
		s.internalError(w, r, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, wire.DeleteArtifactResponse{Status: "deleted", ArtifactID: body.ArtifactID})
}

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}
