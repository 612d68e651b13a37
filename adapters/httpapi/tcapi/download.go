package tcapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// HeaderArtifactID names the artifact a download answers for. The token
// travels in core.DownloadTokenHeader.
const HeaderArtifactID = "X-Cube-Artifact-Id"

// download is GET|HEAD /cube/template/artifact/download?artifact_id=A&token=T.
//
// Errors are real statuses with a plain-text body (upstream answered an
// empty 200, which cubelet took for an empty artifact): 400 bad id; 403,
// always with the same body, for an unknown artifact and for a missing or
// wrong token (the token is the row's, so telling the two apart would let
// anyone probe which ids exist); 404 for an artifact not READY or without
// bytes, told only to a caller with its token. A caller that passes the
// internal routes' check (auth.Header: the master, which may delete
// artifacts anyway; everyone in insecure no-token mode) gets 404 for an
// unknown artifact; that token opens no bytes. The master's proxy strips
// it. A GET on a store that can presign (S3, GCS) is a 302 to a URL
// minted now; otherwise, and for every HEAD (a presigned GET URL does not
// answer HEAD), the bytes or headers are served here with Range, ETag and
// If-None-Match.
//
// The ETag is the artifact's sha256 in quotes. Upstream sent it unquoted,
// which made conditional requests never match; nothing reads the ETag as a
// checksum (cubelet checks the sha256 from its annotation), and a bare sha
// in If-None-Match or If-Range is still understood.
func (s *server) download(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if len(q["token"]) > 1 || len(q["artifact_id"]) > 1 {
		// Which one counts would be each reader's guess.
		http.Error(w, "artifact_id and token may each be given once", http.StatusBadRequest)
		return
	}
	id := q.Get("artifact_id")
	if err := wire.ValidateID("artifact_id", id); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if s.cfg.Artifacts == nil || s.cfg.Store == nil {
		http.Error(w, "artifact serving is not configured", http.StatusServiceUnavailable)
		return
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
			return
		}
		s.refuseDownload(w, r, id, "unknown artifact")
		return
	case err != nil:
		s.plainInternal(w, r, fmt.Errorf("look up artifact %s: %w", id, err))
		return
	}
	if !s.cfg.DownloadTokens.Valid(a.ArtifactID, a.DownloadToken, token) {
		s.refuseDownload(w, r, id, "missing or wrong download token")
		return
	}
	if a.Status != core.ArtifactReady {
		http.Error(w, fmt.Sprintf("artifact %s is not ready (%s)", id, a.Status), http.StatusNotFound)
		return
	}
	key := core.ObjectKeyOf(a)
	info, err := s.cfg.Store.Stat(ctx, key)
	switch {
	case errors.Is(err, core.ErrNotFound):
		http.Error(w, fmt.Sprintf("artifact %s has no data in the %s store", id, s.cfg.Store.Backend()), http.StatusNotFound)
		return
	case err != nil:
		s.plainInternal(w, r, fmt.Errorf("stat artifact %s: %w", id, err))
		return
	}

	w.Header().Set(HeaderArtifactID, id)
	if r.Method == http.MethodGet {
		url, err := s.cfg.Store.SignedURL(ctx, key, s.cfg.SignedURLTTL)
		switch {
		case err == nil:
			w.Header().Set("Cache-Control", "no-store")
			http.Redirect(w, r, url, http.StatusFound)
			return
		case !errors.Is(err, core.ErrUnsupported):
			// Streaming through this process still works; note why the
			// cheaper redirect did not.
			s.log.WarnContext(ctx, "presigning artifact URL failed; streaming instead", "artifact_id", id, "err", err)
		}
	}

	sha := strings.ToLower(a.Ext4SHA256)
	if sha == "" {
		sha = strings.ToLower(info.SHA256)
	}
	if sha != "" {
		w.Header().Set("ETag", `"`+sha+`"`)
		quoteBareETags(r, "If-None-Match")
		quoteBareETags(r, "If-Range")
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	if n := rangeCount(r.Header.Get("Range")); n > MaxRanges {
		// Each range is its own ranged read of the store (an S3 GET);
		// a request for hundreds of tiny ranges would multiply one
		// download into hundreds of them.
		w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", info.Size))
		http.Error(w, fmt.Sprintf("%d byte ranges requested, at most %d are served", n, MaxRanges), http.StatusRequestedRangeNotSatisfiable)
		return
	}
	if wire.ZeroSuffixRange(w, r, info.Size) {
		return
	}
	rs := &storeReader{ctx: ctx, store: s.cfg.Store, key: key, size: info.Size}
	defer rs.Close()
	http.ServeContent(w, r, "", time.Time{}, rs)
}

// MaxRanges is the most byte ranges one download request may ask for;
// more are refused with 416 (RFC 9110 lets a server reject many small
// ranges). Cubelet asks for one.
const MaxRanges = 16

// rangeCount is the number of ranges in a Range header of the bytes unit
// (0 for none or another unit, which net/http refuses itself).
func rangeCount(h string) int {
	spec, ok := strings.CutPrefix(strings.TrimSpace(h), "bytes=")
	if !ok {
		return 0
	}
	return strings.Count(spec, ",") + 1
}

// downloadRefused is the body of every 403 of the download route.
const downloadRefused = "unknown artifact, or a missing or wrong download token"

// refuseDownload answers 403 with the one body every refusal shares, and
// logs the reason (never the token) for the operator.
func (s *server) refuseDownload(w http.ResponseWriter, r *http.Request, id, reason string) {
	s.log.InfoContext(r.Context(), "artifact download refused", "artifact_id", id, "reason", reason)
	http.Error(w, downloadRefused, http.StatusForbidden)
}

// internalCaller reports whether r passes the internal routes' token check
// (auth.Middleware): it carries the configured token, or none is
// configured and the insecure opt-in is on.
func (s *server) internalCaller(r *http.Request) bool {
	token := strings.TrimSpace(s.cfg.Token)
	if token == "" {
		return s.cfg.InsecureNoToken
	}
	return auth.Equal(r.Header.Get(auth.Header), token)
}

func (s *server) plainInternal(w http.ResponseWriter, r *http.Request, err error) {
	s.log.ErrorContext(r.Context(), "artifact download failed", "err", err)
	status := http.StatusInternalServerError
	if errors.Is(err, core.ErrStoreNotInitialized) {
		status = http.StatusServiceUnavailable
	}
	http.Error(w, http.StatusText(status), status)
}

// quoteBareETags rewrites a bare entity tag (abc) in a conditional header to
// the quoted form ("abc") net/http compares, for clients that echo the
// unquoted ETag upstream used to send.
func quoteBareETags(r *http.Request, header string) {
	v := r.Header.Get(header)
	if v == "" {
		return
	}
	parts := strings.Split(v, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p != "" && p != "*" && !strings.HasPrefix(p, `"`) && !strings.HasPrefix(p, `W/`) {
			p = `"` + p + `"`
		}
		parts[i] = p
	}
	r.Header.Set(header, strings.Join(parts, ", "))
}

// storeReader is an io.ReadSeeker over ArtifactStore.Open: Seek only moves
// the offset; the next Read opens a ranged reader there. http.ServeContent
// seeks to each requested range, so only the bytes asked for are read.
//
// A multi-range answer is written by a goroutine of net/http's that can
// still be reading when the handler returns (the client went away): mu
// guards the fields, and once Close has run nothing opens a reader again.
type storeReader struct {
	ctx   context.Context
	store ports.ArtifactStore
	key   string
	size  int64

	mu     sync.Mutex
	off    int64
	rc     io.ReadCloser
	closed bool
}

func (s *storeReader) Read(p []byte) (int, error) {
	s.mu.Lock()
	if s.off >= s.size {
		s.mu.Unlock()
		return 0, io.EOF
	}
	rc, err := s.openLocked()
	s.mu.Unlock()
	if err != nil {
		return 0, err
	}
	// Not under mu: a Close meanwhile closes rc, which ends this read.
	n, err := rc.Read(p)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.off += int64(n)
	if errors.Is(err, io.EOF) && s.off < s.size {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// openLocked returns the store's reader at off, opening one unless one is
// open; s.mu is held.
func (s *storeReader) openLocked() (io.ReadCloser, error) {
	if s.closed {
		return nil, os.ErrClosed
	}
	if s.rc == nil {
		rc, err := s.store.Open(s.ctx, s.key, s.off, -1)
		if err != nil {
			return nil, err
		}
		s.rc = rc
	}
	return s.rc, nil
}

// errNotAFile: the store's reader is not a local file; net/http copies
// through a buffer instead of calling sendfile.
var errNotAFile = errors.New("the artifact is not read from a local file")

// SyscallConn hands net/http the open file when the store reads from local
// files (the file store returns the *os.File itself): its copy to the TCP
// connection then becomes sendfile(2), and the page cache goes to the
// socket without being copied into this process and out again. sendfile
// moves the file's own offset; the RawConn reads it back into off, so a
// Read or Seek afterwards is where the bytes sent left off.
func (s *storeReader) SyscallConn() (syscall.RawConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.off >= s.size {
		return nil, errNotAFile
	}
	rc, err := s.openLocked()
	if err != nil {
		return nil, err
	}
	f, ok := rc.(*os.File)
	if !ok {
		return nil, errNotAFile
	}
	raw, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	return &offsetConn{RawConn: raw, s: s, f: f}, nil
}

// offsetConn is a file's RawConn that keeps storeReader.off in step with
// the file offset the calls move.
type offsetConn struct {
	syscall.RawConn
	s *storeReader
	f *os.File
}

func (c *offsetConn) Read(fn func(fd uintptr) bool) error {
	err := c.RawConn.Read(fn)
	off, serr := c.f.Seek(0, io.SeekCurrent)
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if serr != nil {
		// The position is unknown: end the reader rather than read
		// on from a wrong offset.
		c.s.off = c.s.size
		return errors.Join(err, serr)
	}
	c.s.off = off
	return err
}

func (s *storeReader) Seek(offset int64, whence int) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = s.off + offset
	case io.SeekEnd:
		abs = s.size + offset
	default:
		return 0, errors.New("storeReader: bad whence")
	}
	if abs < 0 {
		return 0, errors.New("storeReader: negative position")
	}
	if abs != s.off {
		s.dropLocked()
	}
	s.off = abs
	return abs, nil
}

// Close closes the open reader, if any, and keeps any from opening again.
func (s *storeReader) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return s.dropLocked()
}

// dropLocked closes the open reader; the next Read opens one at off.
func (s *storeReader) dropLocked() error {
	if s.rc == nil {
		return nil
	}
	err := s.rc.Close()
	s.rc = nil
	return err
}
