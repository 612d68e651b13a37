package tcapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// chunkIndex is GET core.ChunkIndexPath?artifact_id=A (token as for the
// download): the artifact's chunk index, encoded (core/chunk), or 404
// when it has none (built before chunks, or chunks are off), which tells
// the node to download the whole file. The refusals are the download's.
func (s *server) chunkIndex(w http.ResponseWriter, r *http.Request) {
	a, ok := s.downloadable(w, r)
	if !ok {
		return
	}
	if s.cfg.Chunks == nil {
		http.Error(w, "this template center keeps no chunks", http.StatusNotFound)
		return
	}
	x, err := s.cfg.Chunks.Index(r.Context(), core.ObjectKeyOf(a))
	switch {
	case errors.Is(err, core.ErrNotFound):
		http.Error(w, fmt.Sprintf("artifact %s has no chunk index", a.ArtifactID), http.StatusNotFound)
		return
	case err != nil:
		s.plainInternal(w, r, fmt.Errorf("chunk index of %s: %w", a.ArtifactID, err))
		return
	}
	b, err := x.Marshal()
	if err != nil {
		s.plainInternal(w, r, fmt.Errorf("chunk index of %s: %w", a.ArtifactID, err))
		return
	}
	w.Header().Set(HeaderArtifactID, a.ArtifactID)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

// chunkData is GET core.ChunkDataPath?artifact_id=A&first=I&count=N: the
// bytes of the data chunks I..I+N-1 of the artifact's index, in order,
// zero chunks skipped (N at most core.MaxChunksPerRequest). Only chunks
// of the artifact the token opens are served, read from the chunk store
// as stored: the node checks each against its index.
func (s *server) chunkData(w http.ResponseWriter, r *http.Request) {
	a, ok := s.downloadable(w, r)
	if !ok {
		return
	}
	if s.cfg.Chunks == nil {
		http.Error(w, "this template center keeps no chunks", http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	first, err1 := strconv.Atoi(q.Get("first"))
	count, err2 := strconv.Atoi(q.Get("count"))
	if err1 != nil || err2 != nil || first < 0 || count < 1 || count > core.MaxChunksPerRequest {
		http.Error(w, fmt.Sprintf("first must be a chunk number and count 1..%d", core.MaxChunksPerRequest), http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	x, err := s.cfg.Chunks.Index(ctx, core.ObjectKeyOf(a))
	switch {
	case errors.Is(err, core.ErrNotFound):
		http.Error(w, fmt.Sprintf("artifact %s has no chunk index", a.ArtifactID), http.StatusNotFound)
		return
	case err != nil:
		s.plainInternal(w, r, fmt.Errorf("chunk index of %s: %w", a.ArtifactID, err))
		return
	}
	if first+count > len(x.Chunks) {
		http.Error(w, fmt.Sprintf("chunks %d..%d: the index has %d", first, first+count-1, len(x.Chunks)), http.StatusRequestedRangeNotSatisfiable)
		return
	}
	want := x.Chunks[first : first+count]
	var total int64
	for _, e := range want {
		if !e.Zero {
			total += int64(e.Length)
		}
	}
	w.Header().Set(HeaderArtifactID, a.ArtifactID)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(total, 10))
	for _, e := range want {
		if e.Zero {
			continue
		}
		rc, err := s.cfg.Chunks.OpenChunk(ctx, e.ID())
		if err != nil {
			// The status is sent: end the body short, which the node
			// sees as a failed fetch.
			s.log.ErrorContext(ctx, "chunk missing from the chunk store", "artifact_id", a.ArtifactID, "chunk", e.ID(), "err", err)
			panic(http.ErrAbortHandler)
		}
		_, err = io.CopyN(w, rc, int64(e.Length))
		rc.Close()
		if err != nil {
			panic(http.ErrAbortHandler)
		}
	}
}

// downloadable answers the checks every route serving an artifact's bytes
// makes (its id, its token, READY) and returns the artifact, or answers the
// refusal and returns false.
func (s *server) downloadable(w http.ResponseWriter, r *http.Request) (*core.Artifact, bool) {
	q := r.URL.Query()
	if len(q["token"]) > 1 || len(q["artifact_id"]) > 1 {
		// Which one counts would be each reader's guess.
		http.Error(w, "artifact_id and token may each be given once", http.StatusBadRequest)
		return nil, false
	}
	id := q.Get("artifact_id")
	if err := wire.ValidateID("artifact_id", id); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil, false
	}
	if s.cfg.Artifacts == nil || s.cfg.Store == nil {
		http.Error(w, "artifact serving is not configured", http.StatusServiceUnavailable)
		return nil, false
	}
	token := r.Header.Get(core.DownloadTokenHeader)
	if token == "" {
		token = q.Get("token")
	}
	ctx := r.Context()
	a, err := s.cfg.Artifacts.Get(ctx, id)
	switch {
	case errors.Is(err, core.ErrNotFound):
		// The token lives on the row: without one, an unknown id must look
		// like a refused token, or the route tells anyone which ids exist.
		if s.internalCaller(r) {
			http.Error(w, "artifact not found", http.StatusNotFound)
			return nil, false
		}
		s.refuseDownload(w, r, id, "unknown artifact")
		return nil, false
	case err != nil:
		s.plainInternal(w, r, fmt.Errorf("look up artifact %s: %w", id, err))
		return nil, false
	}
	if !s.cfg.DownloadTokens.Valid(a.ArtifactID, a.DownloadToken, token) {
		s.refuseDownload(w, r, id, "missing or wrong download token")
		return nil, false
	}
	if a.Status != core.ArtifactReady {
		http.Error(w, fmt.Sprintf("artifact %s is not ready (%s)", id, a.Status), http.StatusNotFound)
		return nil, false
	}
	return a, true
}

// chunkUpload publishes an uploaded artifact as chunks too, read back from
// the store, unless its index is there already. A failure only costs the
// nodes a whole-file download, so it is logged, not answered.
func (s *server) chunkUpload(ctx context.Context, key string, want ports.ObjectInfo) {
	if s.cfg.Chunks == nil {
		return
	}
	if x, err := s.cfg.Chunks.Index(ctx, key); err == nil && x.SHA256Hex() == want.SHA256 && x.Size == want.Size {
		return
	}
	rc, err := s.cfg.Store.Open(ctx, key, 0, -1)
	if err == nil {
		err = s.cfg.Chunks.Put(ctx, key, rc, want)
		rc.Close()
	}
	if err != nil {
		s.log.WarnContext(ctx, "uploaded artifact not published as chunks: nodes download it whole", "key", key, "err", err)
	}
}
