package tcapi

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// upload is POST /tc/api/v1/artifact/upload (migrate / tpl merge; the
// contract is documented in package wire). Everything is checked before the
// body is read, so a refused upload transfers nothing when the client sent
// "Expect: 100-continue". The bytes become visible under the artifact's key
// only once their size and sha256 match (ports.ArtifactStore.Put).
//
// An object already stored under the key with the same sha256 and size is
// kept ("exists"); one with a different sha256 is never replaced (409),
// because nodes may hold and verify the old bytes. An object of unknown
// sha256 (not written by our stores) is overwritten by the verified upload.
func (s *server) upload(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	id := q.Get(wire.QueryArtifactID)
	if err := wire.ValidateID(wire.QueryArtifactID, id); err != nil {
		wire.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	sha := strings.ToLower(q.Get(wire.QuerySHA256))
	if !isSHA256Hex(sha) {
		wire.WriteError(w, http.StatusBadRequest, "sha256: must be the body's sha256 as 64 hex characters")
		return
	}
	size, err := uploadSize(q.Get(wire.QuerySize), r.ContentLength)
	if err != nil {
		wire.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if size > s.cfg.MaxUploadBytes {
		wire.WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("size: %d bytes is over the %d byte limit", size, s.cfg.MaxUploadBytes))
		return
	}
	if s.cfg.Store == nil {
		wire.WriteError(w, http.StatusServiceUnavailable, "artifact store not attached")
		return
	}
	ctx := r.Context()
	if s.cfg.Artifacts != nil {
		a, err := s.cfg.Artifacts.Get(ctx, id)
		if err != nil {
			s.internalError(w, r, fmt.Errorf("artifact %s: %w", id, err))
			return
		}
		if a.Ext4SHA256 != "" && !strings.EqualFold(a.Ext4SHA256, sha) {
			wire.WriteError(w, http.StatusConflict, fmt.Sprintf("artifact %s records sha256 %s, the upload declares %s", id, a.Ext4SHA256, sha))
			return
		}
	}

	key := core.ArtifactObjectKey(id)
	resp := wire.UploadResponse{Status: "uploaded", ArtifactID: id, ObjectKey: key,
		StorageBackend: s.cfg.Store.Backend(), SHA256: sha, SizeBytes: size}
	info, err := s.cfg.Store.Stat(ctx, key)
	switch {
	case err == nil && info.SHA256 == sha && info.Size == size:
		resp.Status = "exists"
	case err == nil && info.SHA256 != "":
		wire.WriteError(w, http.StatusConflict, fmt.Sprintf("artifact %s is already stored with sha256 %s and %d bytes", id, info.SHA256, info.Size))
		return
	case err != nil && !errors.Is(err, core.ErrNotFound):
		s.internalError(w, r, fmt.Errorf("stat %s: %w", key, err))
		return
	}
	if resp.Status == "uploaded" {
		if err := s.cfg.Store.Put(ctx, key, r.Body, ports.ObjectInfo{Size: size, SHA256: sha}); err != nil {
			s.internalError(w, r, fmt.Errorf("store artifact %s: %w", id, err))
			return
		}
	}
	if s.cfg.Uploads != nil {
		err := s.cfg.Uploads.RecordUpload(ctx, core.UploadedArtifact{ArtifactID: id, ObjectKey: key,
			StorageBackend: resp.StorageBackend, SHA256: sha, SizeBytes: size})
		if err != nil {
			s.internalError(w, r, fmt.Errorf("record upload of %s: %w", id, err))
			return
		}
	}
	wire.WriteJSON(w, http.StatusOK, resp)
}

// uploadSize takes the size from the query or Content-Length; when both are
// given they must agree.
func uploadSize(query string, contentLength int64) (int64, error) {
	if query == "" {
		if contentLength <= 0 {
			return 0, &core.FieldError{Field: "size", Reason: "is required (query size= or Content-Length) and must be positive"}
		}
		return contentLength, nil
	}
	n, err := strconv.ParseInt(query, 10, 64)
	if err != nil || n <= 0 {
		return 0, &core.FieldError{Field: "size", Reason: fmt.Sprintf("%q is not a positive byte count", query)}
	}
	if contentLength >= 0 && contentLength != n {
		return 0, &core.FieldError{Field: "size", Reason: fmt.Sprintf("%d disagrees with Content-Length %d", n, contentLength)}
	}
	return n, nil
}
