package cubeapi

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/envelope"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/internal/hostilehttp"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/core"
)

// TestRefusalsDoNotWaitForTheBody: a request the master refuses (bad
// credentials on the callback or a public route, no such route, a method
// the path does not serve, a credential sent twice) is answered while its
// body is still arriving, and the connection is closed rather than read
// on. Before, net/http read up to 256 KiB of the body first, for as long
// as the read timeout (120 s) let a client trickle it.
func TestRefusalsDoNotWaitForTheBody(t *testing.T) {
	svc := &services{}
	h := newAuthServer(t, svc, "")
	for _, tc := range []struct {
		name, method, target string
		header               http.Header
		want                 int
	}{
		{"callback without the token", http.MethodPost, wire.JobStatusPath("job-1"), nil, http.StatusUnauthorized},
		{"callback with a wrong token", http.MethodPost, wire.JobStatusPath("job-1"), http.Header{auth.Header: {"guess"}}, http.StatusUnauthorized},
		{"public route without credentials", http.MethodPost, PathFromImage, nil, http.StatusOK},
		{"public route, wrong bearer", http.MethodPost, PathTemplate, http.Header{"Authorization": {"Bearer wrong-bearer-token-000000"}}, http.StatusOK},
		{"no such route", http.MethodPost, "/cube/nothing/here", nil, http.StatusNotFound},
		{"no such route outside /cube", http.MethodPost, "/nothing", nil, http.StatusNotFound},
		{"method not served", http.MethodPut, PathFromImage, nil, http.StatusMethodNotAllowed},
		{"Authorization twice", http.MethodPost, PathFromImage, http.Header{"Authorization": {"Bearer " + apiBearer, "Bearer " + apiBearer}}, http.StatusBadRequest},
	} {
		resp := hostilehttp.SlowBody(t, h, tc.method, tc.target, tc.header)
		if resp.StatusCode != tc.want || !resp.Close {
			t.Errorf("%s: %d (close %v), want %d and the connection closed", tc.name, resp.StatusCode, resp.Close, tc.want)
		}
	}
	if len(svc.calls) != 0 {
		t.Fatalf("refused requests reached the services: %v", svc.calls)
	}
}

// TestRepeatedCredentialsAreRefused: a request carrying a credential
// header twice is refused whichever route it asks for, even when both
// copies are valid: which one counts would be each reader's choice (Go's
// Header.Get takes the first, a proxy may take the last). Before, the
// first won.
func TestRepeatedCredentialsAreRefused(t *testing.T) {
	svc := &services{}
	h := newAuthServer(t, svc, "")
	bearer := "Bearer " + apiBearer
	for _, tc := range []struct {
		name, method, target string
		header               http.Header
		envelope             bool
	}{
		{"Authorization on a public route", http.MethodGet, PathTemplate, http.Header{"Authorization": {bearer, bearer}}, true},
		{"Authorization, a wrong one first", http.MethodGet, PathTemplate, http.Header{"Authorization": {"Bearer nope", bearer}}, true},
		{"Authorization on the callback", http.MethodPost, wire.JobStatusPath("job-1"), http.Header{"Authorization": {"a", "b"}, auth.Header: {testToken}}, false},
		{"the internal token", http.MethodPost, wire.JobStatusPath("job-1"), http.Header{auth.Header: {testToken, testToken}}, false},
		{"a signed header", http.MethodGet, PathTemplate, http.Header{"Cube_signature": {"a", "b"}}, true},
		{"a download token", http.MethodGet, PathDownload + "?artifact_id=rfs-1", http.Header{core.DownloadTokenHeader: {"a", "b"}}, false},
		{"Authorization on metrics", http.MethodGet, PathMetrics, http.Header{"Authorization": {"a", "b"}}, false},
	} {
		rec := doHeaders(h, tc.method, tc.target, tc.header)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "more than once") {
			t.Errorf("%s: %d %.200s, want 400 naming the header", tc.name, rec.Code, rec.Body)
			continue
		}
		if tc.envelope {
			ret, _ := decodeMap(t, rec.Body.Bytes())["ret"].(map[string]any)
			if code, _ := ret["ret_code"].(float64); code != envelope.CodeParams {
				t.Errorf("%s: ret_code %v, want %d", tc.name, code, envelope.CodeParams)
			}
		}
	}
	// One copy is served as always.
	if rec := doHeaders(h, http.MethodGet, PathTemplate, http.Header{"Authorization": {bearer}}); retCode(t, rec) != 200 {
		t.Fatalf("one Authorization header: %d %s", rec.Code, rec.Body)
	}
}

// doHeaders is do with headers that may repeat.
func doHeaders(h http.Handler, method, target string, header http.Header) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	req.Header = header.Clone()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestCAFileZeroSuffixRange: the CA route answers "bytes=-0" with 416,
// as RFC 9110 says, not an empty 206.
func TestCAFileZeroSuffixRange(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cube-root-ca.crt"), []byte("-----BEGIN CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{Token: testToken, CADir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	rec := do(h, http.MethodGet, "/cube/ca/cube-root-ca.crt", "", map[string]string{"Range": "bytes=-0"})
	if rec.Code != http.StatusRequestedRangeNotSatisfiable || rec.Header().Get("Content-Range") != "bytes */28" {
		t.Fatalf("bytes=-0: %d, Content-Range %q", rec.Code, rec.Header().Get("Content-Range"))
	}
}
