package wire

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestZeroSuffixRange: a range set of zero-byte suffixes only is
// unsatisfiable (416 with the size); such a suffix beside a satisfiable
// range is dropped; other headers pass untouched; with If-Range the whole
// body is served instead.
func TestZeroSuffixRange(t *testing.T) {
	const body = "0123456789"
	for _, tc := range []struct {
		rng, ifRange string
		want         int
		wantBody     string
	}{
		{"bytes=-0", "", 416, ""},
		{"bytes=-00, -0", "", 416, ""},
		{"bytes= -0 ", "", 416, ""},
		{"bytes=-0,2-3", "", 206, "23"},
		{"bytes=-3", "", 206, "789"},
		{"bytes=0-0", "", 206, "0"},
		{"bytes=-10", "", 206, body},
		{"items=-0", "", 416, ""}, // net/http's own answer to another unit
		{"", "", 200, body},
		{"bytes=-0", `"etag"`, 200, body},
	} {
		r := httptest.NewRequest(http.MethodGet, "/x", nil)
		if tc.rng != "" {
			r.Header.Set("Range", tc.rng)
		}
		if tc.ifRange != "" {
			r.Header.Set("If-Range", tc.ifRange)
		}
		w := httptest.NewRecorder()
		if !ZeroSuffixRange(w, r, int64(len(body))) {
			http.ServeContent(w, r, "", time.Time{}, strings.NewReader(body))
		}
		if w.Code != tc.want || (tc.want != 416 && w.Body.String() != tc.wantBody) {
			t.Errorf("Range %q If-Range %q: %d %q, want %d %q", tc.rng, tc.ifRange, w.Code, w.Body, tc.want, tc.wantBody)
		}
		if w.Code == 416 && strings.HasPrefix(tc.rng, "bytes=") && w.Header().Get("Content-Range") != "bytes */10" {
			t.Errorf("Range %q: Content-Range %q", tc.rng, w.Header().Get("Content-Range"))
		}
	}
}
