package cubeapi

import (
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/cubeview"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/envelope"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/core"
)

// DefaultCADir is where upstream installs the CubeEgress root CA on the
// master.
const DefaultCADir = "/etc/cube/ca"

// caFiles is the closed list /cube/ca/{filename} serves; keyFile needs the
// shared token.
var caFiles = map[string]bool{"cube-root-ca.crt": true, caKeyFile: true}

const caKeyFile = "cube-root-ca.key"

// sandboxBody reads a sandbox create request; on failure it answers the
// envelope itself.
func (s *server) sandboxBody(w http.ResponseWriter, r *http.Request) (*core.SandboxRequest, bool) {
	var raw json.RawMessage
	if !s.decode(w, r, &raw) {
		return nil, false
	}
	req, _, err := core.ParseSandboxRequest(raw)
	if err != nil {
		s.fail(w, r, "", err)
		return nil, false
	}
	return req, true
}

type resolvedResponse struct {
	envelope.Response
	cubeview.ResolvedRequest
}

// resolveSandboxRequest is POST /cube/template/resolve: the sandbox create
// request completed from the template it names, without creating
// anything.
func (s *server) resolveSandboxRequest(w http.ResponseWriter, r *http.Request) {
	req, ok := s.sandboxBody(w, r)
	if !ok {
		return
	}
	if s.cfg.Catalog == nil {
		s.fail(w, r, req.RequestID, errCatalogOff)
		return
	}
	res, err := s.cfg.Catalog.ResolveSandboxRequest(r.Context(), req)
	if err != nil {
		s.fail(w, r, req.RequestID, err)
		return
	}
	s.write(w, r, resolvedResponse{Response: envelope.OK(req.RequestID), ResolvedRequest: cubeview.ResolvedRequest{
		TemplateID: res.TemplateID, Alias: res.Alias, MergedRequest: res.Request}})
}

type previewResponse struct {
	envelope.Response
	cubeview.Preview
}

// previewSandbox is POST /cube/sandbox/preview (upstream's tpl render): the
// caller's request, the request merged with its template, and the node
// request that would be sent. A request naming no template is previewed
// as is.
func (s *server) previewSandbox(w http.ResponseWriter, r *http.Request) {
	req, ok := s.sandboxBody(w, r)
	if !ok {
		return
	}
	out := previewResponse{Preview: cubeview.Preview{APIRequest: req, MergedRequest: req}}
	if req.Annotations[core.AnnotationTemplateID] != "" {
		if s.cfg.Catalog == nil {
			s.fail(w, r, req.RequestID, errCatalogOff)
			return
		}
		res, err := s.cfg.Catalog.ResolveSandboxRequest(r.Context(), req)
		if err != nil {
			s.fail(w, r, req.RequestID, err)
			return
		}
		out.MergedRequest = res.Request
	}
	if s.cfg.RenderCubelet != nil {
		node, err := s.cfg.RenderCubelet(out.MergedRequest)
		if err != nil {
			out.Response = envelope.Fail(req.RequestID, err)
			s.write(w, r, out)
			return
		}
		out.CubeletRequest = node
	}
	out.Response = envelope.OK(out.MergedRequest.RequestID)
	s.write(w, r, out)
}

// caFile is GET|HEAD /cube/ca/{filename}: the CubeEgress root CA, for
// nodes that run their own egress proxy. Only the names on the list are
// served. Upstream serves the private key to anyone; here it needs the
// shared callback token, and errors are real HTTP statuses with an
// envelope body.
func (s *server) caFile(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "filename")
	if !caFiles[name] {
		s.caError(w, http.StatusNotFound, &core.FieldError{Field: "filename", Reason: "is not a served CA file"})
		return
	}
	if name == caKeyFile && !s.tokenOK(r) {
		s.caError(w, http.StatusUnauthorized, errors.New("the CA private key needs the shared token"))
		return
	}
	dir := s.cfg.CADir
	if dir == "" {
		dir = DefaultCADir
	}
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, fs.ErrNotExist) {
			status = http.StatusNotFound
		}
		s.log.WarnContext(r.Context(), "CA file not served", "file", name, "err", err)
		s.caError(w, status, errors.New(http.StatusText(status)))
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		s.caError(w, http.StatusNotFound, errors.New("not a regular file"))
		return
	}
	if wire.ZeroSuffixRange(w, r, st.Size()) {
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(st.Size(), 10))
	http.ServeContent(w, r, name, st.ModTime(), f)
}

func (s *server) caError(w http.ResponseWriter, status int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(envelope.Fail("", err))
}

// tokenOK reports whether r carries the shared token (never with no token
// configured, whatever the insecure setting: the key stays fail-closed).
func (s *server) tokenOK(r *http.Request) bool {
	return s.cfg.Token != "" && auth.Equal(r.Header.Get(auth.Header), s.cfg.Token)
}
