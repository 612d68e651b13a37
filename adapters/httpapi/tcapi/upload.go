package tcapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// upload is POST /tc/api/v1/artifact/upload (migrate / tpl merge; the
// contract is documented in package wire). Two forms are accepted: ours,
// the raw ext4 with its sha256 and size in the query, checked before the
// body is read, so a refused upload transfers nothing when the client sent
// "Expect: 100-continue"; and upstream master's multipart form
// (uploadForm). The bytes become visible under the artifact's key only
// once their size and sha256 match (ports.ArtifactStore.Put).
//
// An object already stored under the key with the same sha256 and size is
// kept ("exists"); one with a different sha256 is never replaced (409),
// because nodes may hold and verify the old bytes. An object of unknown
// sha256 (not written by our stores) is overwritten by the verified upload.
func (s *server) upload(w http.ResponseWriter, r *http.Request) {
	r.Body = idleReads(w, r.Body, s.cfg.UploadIdleTimeout)
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "multipart/form-data" {
		s.uploadForm(w, r)
		return
	}
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
	s.storeUpload(w, r, id, ports.ObjectInfo{Size: size, SHA256: sha}, r.Body)
}

// recordedInfo reads what the artifact row says about the bytes; a row
// whose sha256 or size differs from the declared one (when both are known)
// is a conflict (409). It must run before anything is stored: bytes put
// under the key are never replaced by a later upload of other bytes.
func (s *server) recordedInfo(r *http.Request, id string, declared ports.ObjectInfo) (ports.ObjectInfo, error) {
	if s.cfg.Artifacts == nil {
		return ports.ObjectInfo{}, nil
	}
	a, err := s.cfg.Artifacts.Get(r.Context(), id)
	if err != nil {
		return ports.ObjectInfo{}, fmt.Errorf("artifact %s: %w", id, err)
	}
	if declared.SHA256 != "" && a.Ext4SHA256 != "" && !strings.EqualFold(a.Ext4SHA256, declared.SHA256) {
		return ports.ObjectInfo{}, fmt.Errorf("artifact %s records sha256 %s, the upload declares %s: %w", id, a.Ext4SHA256, declared.SHA256, core.ErrConflict)
	}
	if declared.Size > 0 && a.Ext4SizeBytes > 0 && a.Ext4SizeBytes != declared.Size {
		return ports.ObjectInfo{}, fmt.Errorf("artifact %s records %d bytes, the upload declares %d: %w", id, a.Ext4SizeBytes, declared.Size, core.ErrConflict)
	}
	return ports.ObjectInfo{Size: a.Ext4SizeBytes, SHA256: strings.ToLower(a.Ext4SHA256)}, nil
}

// storeUpload stores body (want.Size bytes of sha256 want.SHA256) under the
// artifact's key, records where it lives and answers. It reads no body
// when the row refuses want.
func (s *server) storeUpload(w http.ResponseWriter, r *http.Request, id string, want ports.ObjectInfo, body io.Reader) {
	ctx := r.Context()
	key := core.ArtifactObjectKey(id)
	if _, err := s.recordedInfo(r, id, want); err != nil {
		s.internalError(w, r, err)
		return
	}
	resp := wire.UploadResponse{Status: "uploaded", ArtifactID: id, ObjectKey: key,
		StorageBackend: s.cfg.Store.Backend(), SHA256: want.SHA256, SizeBytes: want.Size,
		Ext4SHA256: want.SHA256, Ext4SizeBytes: want.Size}
	if s.cfg.LocalPath != nil {
		resp.Ext4Path = s.cfg.LocalPath(key)
	}
	info, err := s.cfg.Store.Stat(ctx, key)
	switch {
	case err == nil && info.SHA256 == want.SHA256 && info.Size == want.Size:
		resp.Status = "exists"
	case err == nil && info.SHA256 != "":
		wire.WriteError(w, http.StatusConflict, fmt.Sprintf("artifact %s is already stored with sha256 %s and %d bytes", id, info.SHA256, info.Size))
		return
	case err != nil && !errors.Is(err, core.ErrNotFound):
		s.internalError(w, r, fmt.Errorf("stat %s: %w", key, err))
		return
	}
	if resp.Status == "uploaded" {
		if err := s.cfg.Store.Put(ctx, key, body, want); err != nil {
			s.internalError(w, r, fmt.Errorf("store artifact %s: %w", id, err))
			return
		}
	}
	s.chunkUpload(ctx, key, want)
	if s.cfg.Uploads != nil {
		err := s.cfg.Uploads.RecordUpload(ctx, core.UploadedArtifact{ArtifactID: id, ObjectKey: key,
			StorageBackend: resp.StorageBackend, SHA256: want.SHA256, SizeBytes: want.Size})
		if err != nil {
			if resp.Status == "uploaded" && errors.Is(err, core.ErrConflict) {
				// The row changed after the check: what was just stored
				// must not stay under the key and block the right bytes.
				s.dropUpload(r, key)
			}
			s.internalError(w, r, fmt.Errorf("record upload of %s: %w", id, err))
			return
		}
	}
	wire.WriteJSON(w, http.StatusOK, resp)
}

// dropUpload deletes the object this request stored, even if the client
// has gone.
func (s *server) dropUpload(r *http.Request, key string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), dropUploadTimeout)
	defer cancel()
	if err := s.cfg.Store.Delete(ctx, key); err != nil {
		s.log.ErrorContext(ctx, "delete refused upload", "key", key, "err", err)
	}
}

const dropUploadTimeout = 30 * time.Second

// idleReads lifts the server's read timeout (which bounds a whole request
// and would cut a large upload) for an upload's body: each read must
// instead make progress within idle. Only callers with the shared token
// get here.
func idleReads(w http.ResponseWriter, body io.ReadCloser, idle time.Duration) io.ReadCloser {
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(idle)); err != nil {
		return body // not a network connection (tests)
	}
	return &idleBody{ReadCloser: body, rc: rc, idle: idle}
}

type idleBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	idle time.Duration
}

func (b *idleBody) Read(p []byte) (int, error) {
	_ = b.rc.SetReadDeadline(time.Now().Add(b.idle))
	return b.ReadCloser.Read(p)
}

// maxFieldBytes bounds a non-file form field.
const maxFieldBytes = 512

// uploadForm is the upload in upstream master's form (its tcclient
// UploadArtifact): multipart/form-data with the field artifact_id, then
// the part "file" holding the ext4, no sha256 or size. The bytes are
// verified against the artifact row's sha256 and size when it records
// them; otherwise they are spooled to SpoolDir and hashed first. The
// artifact_id field must come before the file (upstream writes it first);
// an artifact_id query parameter is accepted instead.
func (s *server) uploadForm(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Store == nil {
		wire.WriteError(w, http.StatusServiceUnavailable, "artifact store not attached")
		return
	}
	// The form's own framing is small; the ext4 is bounded by the cap.
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxUploadBytes+1<<20)
	mr, err := r.MultipartReader()
	if err != nil {
		wire.WriteError(w, http.StatusBadRequest, "body: not a multipart form: "+err.Error())
		return
	}
	id := r.URL.Query().Get(wire.QueryArtifactID)
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			wire.WriteError(w, http.StatusBadRequest, "file: the form has no file part")
			return
		}
		if err != nil {
			wire.WriteError(w, http.StatusBadRequest, "body: "+err.Error())
			return
		}
		switch part.FormName() {
		case wire.QueryArtifactID:
			b, err := io.ReadAll(io.LimitReader(part, maxFieldBytes))
			if err != nil {
				wire.WriteError(w, http.StatusBadRequest, "artifact_id: "+err.Error())
				return
			}
			id = strings.TrimSpace(string(b))
		case "file":
			if err := wire.ValidateID(wire.QueryArtifactID, id); err != nil {
				wire.WriteError(w, http.StatusBadRequest, err.Error()+" (send the artifact_id field before the file)")
				return
			}
			s.uploadFormFile(w, r, id, part)
			return
		}
		part.Close()
	}
}

func (s *server) uploadFormFile(w http.ResponseWriter, r *http.Request, id string, file io.Reader) {
	want, err := s.recordedInfo(r, id, ports.ObjectInfo{})
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	if want.SHA256 != "" && want.Size > 0 {
		if want.Size > s.cfg.MaxUploadBytes {
			wire.WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("artifact %s: %d bytes is over the %d byte limit", id, want.Size, s.cfg.MaxUploadBytes))
			return
		}
		s.storeUpload(w, r, id, want, file)
		return
	}
	spool, err := os.CreateTemp(s.cfg.SpoolDir, "upload-"+id+"-*")
	if err != nil {
		s.internalError(w, r, fmt.Errorf("spool upload of %s: %w", id, err))
		return
	}
	defer func() { spool.Close(); os.Remove(spool.Name()) }()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(spool, h), io.LimitReader(file, s.cfg.MaxUploadBytes+1))
	if err != nil {
		wire.WriteError(w, http.StatusBadRequest, fmt.Sprintf("file: reading the upload of %s: %v", id, err))
		return
	}
	if n > s.cfg.MaxUploadBytes {
		wire.WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("file: over the %d byte limit", s.cfg.MaxUploadBytes))
		return
	}
	if n == 0 {
		wire.WriteError(w, http.StatusBadRequest, "file: is empty")
		return
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		s.internalError(w, r, fmt.Errorf("spool upload of %s: %w", id, err))
		return
	}
	s.storeUpload(w, r, id, ports.ObjectInfo{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, spool)
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
