package cubeapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/envelope"
)

// The fuzz targets send arbitrary bodies to each public JSON decoder of
// the master (and the internal status callback) through the router wired
// to a real control.Service over SQLite, seeded with templates. Whatever
// the input: no panic, a well-formed answer (public routes: HTTP 200 and
// one envelope object; the callback: a JSON object), no internal or
// database error (130593, 130594, HTTP 5xx) and no secret in the answer.
// Seeds live in testdata/fuzz/<target>; `make fuzz` runs each for a while.

func fuzzPublic(f *testing.F, method string, target func(in []byte) (string, []byte)) {
	e := newSQLEnv(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		path, body := target(in)
		req := httptest.NewRequest(method, path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, req)
		code, msg := envelopeOf(t, rec)
		if code == envelope.CodeInternal || code == envelope.CodeDB {
			t.Fatalf("ret_code %d %q for %q", code, msg, clipMsg(string(body)))
		}
		for _, s := range secrets {
			if strings.Contains(rec.Body.String(), s) {
				t.Fatalf("the answer holds a secret: %s", clipMsg(rec.Body.String()))
			}
		}
	})
}

func bodyOnly(path string) func([]byte) (string, []byte) {
	return func(in []byte) (string, []byte) { return path, in }
}

func FuzzFromImage(f *testing.F)      { fuzzPublic(f, http.MethodPost, bodyOnly(PathFromImage)) }
func FuzzRedo(f *testing.F)           { fuzzPublic(f, http.MethodPost, bodyOnly(PathRedo)) }
func FuzzMigrate(f *testing.F)        { fuzzPublic(f, http.MethodPost, bodyOnly(PathMigrate)) }
func FuzzDeleteTemplate(f *testing.F) { fuzzPublic(f, http.MethodDelete, bodyOnly(PathTemplate)) }
func FuzzCreateTemplate(f *testing.F) { fuzzPublic(f, http.MethodPost, bodyOnly(PathTemplate)) }
func FuzzResolve(f *testing.F)        { fuzzPublic(f, http.MethodPost, bodyOnly(PathResolve)) }
func FuzzPreview(f *testing.F)        { fuzzPublic(f, http.MethodPost, bodyOnly(PathPreview)) }

// FuzzAlias: the input is the path's template id, a newline, the body.
func FuzzAlias(f *testing.F) {
	fuzzPublic(f, http.MethodPut, func(in []byte) (string, []byte) {
		id, body, _ := bytes.Cut(in, []byte("\n"))
		return "/cube/template/" + url.PathEscape(string(id)) + "/alias", body
	})
}

// FuzzStatusCallback: the input is the job id (the seeds use "pending"
// and "seed" for the seeded jobs), a newline, the body; sent with the
// shared token.
func FuzzStatusCallback(f *testing.F) {
	e := newSQLEnv(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		id, body, _ := bytes.Cut(in, []byte("\n"))
		job := string(id)
		switch job {
		case "pending":
			job = e.pendingJob
		case "seed":
			job = e.seedJob
		}
		req := httptest.NewRequest(http.MethodPost, "/internal/template/jobs/"+url.PathEscape(job)+"/status", bytes.NewReader(body))
		req.Header.Set(auth.Header, testToken)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("HTTP %d %s for %q", rec.Code, rec.Body.String(), clipMsg(string(body)))
		}
		var m map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil || m == nil {
			t.Fatalf("HTTP %d answer is not a JSON object: %q", rec.Code, clipMsg(rec.Body.String()))
		}
		if _, ok := m["error"]; rec.Code >= 400 && !ok {
			t.Fatalf("HTTP %d without an error: %s", rec.Code, rec.Body.String())
		}
	})
}
