package cubeapi

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/cubeview"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/envelope"
	"github.com/cubesandbox/templatecenter/core"
)

// Upstream's multipart create-from-image (cubemastercli create-from-image
// --enable-inject-envd --envd-path F): a form field holding the JSON
// request and a file part holding the envd binary.
const (
	FormRequestField = "request"
	FormEnvdFile     = "envd"
	// CallerHeader is the header upstream's cubemastercli, and ours, send
	// with every request ("mastercli").
	CallerHeader = "X-Caller"
)

// isMultipart reports whether r's body is multipart/form-data.
func isMultipart(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && strings.EqualFold(mt, "multipart/form-data")
}

// errBrowserForm refuses a multipart body that came without anything a web
// page cannot attach by itself.
var errBrowserForm = &core.FieldError{Field: "Content-Type", Reason: "multipart/form-data is accepted only from an API client: " +
	"send a credential (Authorization or the signed cube_* headers) or, with authentication off, the " + CallerHeader + " header (cubemastercli sends both)"}

// multipartAllowed is the cross-site guard for a multipart body, which any
// web page can make a browser send to this API. It is accepted only with
// something a browser never sends on its own, and that a page cannot add
// without a CORS preflight, which this API never grants: a credential
// header that authenticated the caller (Authorization, the signed cube_*
// headers), or the callback token, or, when public authentication is off
// (`cubemaster dev`, CUBE_MASTER_AUTH=false), the X-Caller header upstream's
// cubemastercli always sends.
func (s *server) multipartAllowed(r *http.Request) error {
	if _, ok := auth.CallerFrom(r.Context()); ok {
		return nil
	}
	if s.tokenOK(r) {
		return nil
	}
	if s.cfg.PublicAuth == nil && strings.TrimSpace(r.Header.Get(CallerHeader)) != "" {
		return nil
	}
	return errBrowserForm
}

// readMultipart reads the create-from-image form: the "request" field (JSON,
// at most MaxBodyBytes) and, optionally, the "envd" file (at most
// core.MaxEnvdBytes). Other parts are read and ignored, within the body's
// cap. Nothing spills to disk.
func (s *server) readMultipart(w http.ResponseWriter, r *http.Request) (*cubeview.FromImageRequest, []byte, error) {
	maxJSON := s.cfg.MaxBodyBytes
	if maxJSON <= 0 {
		maxJSON = envelope.DefaultMaxBodyBytes
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxJSON+core.MaxEnvdBytes+64<<10)
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, nil, &core.FieldError{Field: "body", Reason: "not a multipart/form-data body: " + err.Error()}
	}
	var body *cubeview.FromImageRequest
	var envd []byte
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, formError("body", err)
		}
		switch part.FormName() {
		case FormRequestField:
			if body != nil {
				return nil, nil, &core.FieldError{Field: FormRequestField, Reason: "is given twice"}
			}
			body = &cubeview.FromImageRequest{}
			if err := envelope.DecodeReader(io.LimitReader(part, maxJSON), body); err != nil {
				var de *envelope.DecodeError
				if errors.As(err, &de) {
					if de.Field == "body" {
						de.Field = FormRequestField
					} else {
						de.Field = FormRequestField + "." + de.Field
					}
				}
				return nil, nil, err
			}
		case FormEnvdFile:
			if envd != nil {
				return nil, nil, &core.FieldError{Field: FormEnvdFile, Reason: "is given twice"}
			}
			if envd, err = io.ReadAll(io.LimitReader(part, core.MaxEnvdBytes+1)); err != nil {
				return nil, nil, formError(FormEnvdFile, err)
			}
			if len(envd) > core.MaxEnvdBytes {
				return nil, nil, &core.FieldError{Field: FormEnvdFile, Reason: fmt.Sprintf("larger than %d bytes (16 MiB)", core.MaxEnvdBytes)}
			}
			if envd == nil {
				envd = []byte{}
			}
		default:
			if _, err := io.Copy(io.Discard, part); err != nil {
				return nil, nil, formError("body", err)
			}
		}
	}
	if body == nil {
		return nil, nil, &core.FieldError{Field: FormRequestField, Reason: "the multipart field holding the JSON request is required"}
	}
	return body, envd, nil
}

// formError names a body that broke off or was too large.
func formError(field string, err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return &envelope.DecodeError{Field: "body", Reason: fmt.Sprintf("larger than %d bytes", mbe.Limit), TooLarge: true}
	}
	return &core.FieldError{Field: field, Reason: "unreadable multipart body: " + err.Error()}
}
