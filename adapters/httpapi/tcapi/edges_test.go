package tcapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/internal/hostilehttp"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/core"
)

// TestRefusalsDoNotWaitForTheBody: a request the data plane refuses (no
// or a wrong internal token, no such route, a method the path does not
// serve, a credential sent twice) is answered while its body is still
// arriving, and the connection is closed rather than read on. Before,
// net/http read up to 256 KiB of the body first, for as long as the read
// timeout (120 s) let a client trickle it.
func TestRefusalsDoNotWaitForTheBody(t *testing.T) {
	b := &fakeBuilds{}
	h := New(Config{Token: testToken, Builds: b, Deleter: &fakeDeleter{}, Store: fileStore(t)})
	for _, tc := range []struct {
		name, method, target string
		header               http.Header
		want                 int
	}{
		{"build without the token", http.MethodPost, wire.PathBuild, nil, http.StatusUnauthorized},
		{"upload with a wrong token", http.MethodPost, wire.PathArtifactUpload + "?artifact_id=a", http.Header{auth.Header: {"guess"}}, http.StatusUnauthorized},
		{"compat rescan without the token", http.MethodPost, PathCompat, nil, http.StatusUnauthorized},
		{"no such route", http.MethodPost, "/tc/api/v1/nothing", nil, http.StatusNotFound},
		{"method not served", http.MethodPut, wire.PathBuild, http.Header{auth.Header: {testToken}}, http.StatusMethodNotAllowed},
		{"token twice", http.MethodPost, wire.PathBuild, http.Header{auth.Header: {testToken, testToken}}, http.StatusBadRequest},
	} {
		resp := hostilehttp.SlowBody(t, h, tc.method, tc.target, tc.header)
		if resp.StatusCode != tc.want || !resp.Close {
			t.Errorf("%s: %d (close %v), want %d and the connection closed", tc.name, resp.StatusCode, resp.Close, tc.want)
		}
		if tc.want == http.StatusMethodNotAllowed && resp.Header.Get("Allow") != http.MethodPost {
			t.Errorf("%s: Allow %q, want POST", tc.name, resp.Header.Values("Allow"))
		}
	}
	if len(b.got) != 0 {
		t.Fatalf("a refused request reached the executor: %+v", b.got)
	}
}

// TestRepeatedCredentialsAreRefused: a credential header (or download
// token parameter) given twice is refused on every route, even when both
// copies are right: which one counts would be each reader's guess.
func TestRepeatedCredentialsAreRefused(t *testing.T) {
	e := newDPEnv(t)
	for _, tc := range []struct {
		name, method, target string
		header               http.Header
	}{
		{"internal token", http.MethodPost, wire.PathBuild, http.Header{auth.Header: {testToken, testToken}}},
		{"internal token, a wrong one first", http.MethodPost, wire.PathArtifactDelete, http.Header{auth.Header: {"x", testToken}}},
		{"download token header", http.MethodGet, dlURL("rfs-a", ""), http.Header{core.DownloadTokenHeader: {"token-a", "token-a"}}},
		{"download token parameter", http.MethodGet, dlURL("rfs-a", "token-a") + "&token=token-a", nil},
		{"Authorization", http.MethodGet, PathHealth, http.Header{"Authorization": {"Bearer a", "Bearer b"}}},
	} {
		req := httptest.NewRequest(tc.method, tc.target, strings.NewReader("{}"))
		req.Header = tc.header.Clone()
		if req.Header == nil {
			req.Header = http.Header{}
		}
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, req)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "once") {
			t.Errorf("%s: %d %.200s, want 400", tc.name, rec.Code, rec.Body)
		}
	}
	if e.runner.count() != 0 || len(e.deleter.got) != 0 {
		t.Fatal("a refused request reached the executor or the deleter")
	}
}
