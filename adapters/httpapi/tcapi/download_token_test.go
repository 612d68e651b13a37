package tcapi

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/core"
)

// TestDownloadTokenIsPerArtifact: an artifact's token opens that artifact
// only; another artifact's token, however valid there, is refused (403),
// in the query or the header. The refusals and the failures are logged
// without the token.
func TestDownloadTokenIsPerArtifact(t *testing.T) {
	st := fileStore(t)
	put(t, st, core.ArtifactObjectKey("rfs-a"), []byte("bytes of a"))
	put(t, st, core.ArtifactObjectKey("rfs-b"), []byte("bytes of b"))
	const tokA, tokB = "token-of-artifact-a-123", "token-of-artifact-b-456"
	lookup := &fakeLookup{rows: map[string]*core.Artifact{
		"rfs-a":    {ArtifactID: "rfs-a", Status: core.ArtifactReady, DownloadToken: tokA, Ext4SHA256: sum([]byte("bytes of a"))},
		"rfs-b":    {ArtifactID: "rfs-b", Status: core.ArtifactReady, DownloadToken: tokB, Ext4SHA256: sum([]byte("bytes of b"))},
		"rfs-gone": {ArtifactID: "rfs-gone", Status: core.ArtifactReady, DownloadToken: tokA},
	}}
	var logs bytes.Buffer
	h := New(Config{Token: testToken, Artifacts: lookup, Store: st, Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	for _, tc := range []struct {
		id, query, header string
		want              int
	}{
		{"rfs-a", tokA, "", http.StatusOK},
		{"rfs-b", tokB, "", http.StatusOK},
		{"rfs-b", tokA, "", http.StatusForbidden},
		{"rfs-a", tokB, "", http.StatusForbidden},
		{"rfs-b", "", tokA, http.StatusForbidden},
		{"rfs-b", tokB, tokA, http.StatusForbidden}, // the header wins
		{"rfs-gone", tokA, "", http.StatusNotFound}, // row without bytes
	} {
		c := call{method: http.MethodGet, target: dlURL(tc.id, tc.query)}
		if tc.header != "" {
			c.header = map[string]string{core.DownloadTokenHeader: tc.header}
		}
		rec := do(t, h, c)
		if rec.Code != tc.want {
			t.Errorf("%s with query %q header %q: %d, want %d", tc.id, tc.query, tc.header, rec.Code, tc.want)
		}
		if strings.Contains(rec.Body.String(), "token-of-") {
			t.Errorf("%s: the answer quotes a token: %q", tc.id, rec.Body.String())
		}
	}
	if strings.Contains(logs.String(), "token-of-") {
		t.Errorf("the data plane logged a download token:\n%s", logs.String())
	}
}

// TestDownloadHidesWhichArtifactsExist: the token is the artifact row's
// own, so without it nobody learns whether an id exists: an unknown id and
// a missing or wrong token get the same status and body, on GET and HEAD.
// A valid token still tells an artifact that is not READY, or has no bytes,
// apart (404); the internal token, which the master sends and which
// already lets it delete artifacts, gets a 404 for an unknown id. The
// internal token opens no bytes.
func TestDownloadHidesWhichArtifactsExist(t *testing.T) {
	st := fileStore(t)
	put(t, st, core.ArtifactObjectKey("rfs-a"), []byte("bytes of a"))
	const tokA = "token-of-artifact-a-123"
	lookup := &fakeLookup{rows: map[string]*core.Artifact{
		"rfs-a":        {ArtifactID: "rfs-a", Status: core.ArtifactReady, DownloadToken: tokA, Ext4SHA256: sum([]byte("bytes of a"))},
		"rfs-building": {ArtifactID: "rfs-building", Status: core.ArtifactBuilding, DownloadToken: tokA},
		"rfs-nobytes":  {ArtifactID: "rfs-nobytes", Status: core.ArtifactReady, DownloadToken: tokA},
		"rfs-notoken":  {ArtifactID: "rfs-notoken", Status: core.ArtifactReady},
	}}
	var logs bytes.Buffer
	h := New(Config{Token: testToken, Artifacts: lookup, Store: st, Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	internal := map[string]string{auth.Header: testToken}
	const refused = http.StatusForbidden
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		var first *httptest.ResponseRecorder
		for _, tc := range []struct {
			name   string
			id     string
			token  string
			header map[string]string
			want   int // 0: refused, with the same body as every refusal
		}{
			{"unknown id, no token", "rfs-unknown", "", nil, 0},
			{"unknown id, some token", "rfs-unknown", tokA, nil, 0},
			{"existing id, no token", "rfs-a", "", nil, 0},
			{"existing id, wrong token", "rfs-a", "guess", nil, 0},
			{"row without a token", "rfs-notoken", "guess", nil, 0},
			{"not ready, no token", "rfs-building", "", nil, 0},
			{"no bytes, wrong token", "rfs-nobytes", "guess", nil, 0},
			{"unknown id, wrong internal token", "rfs-unknown", "", map[string]string{auth.Header: "guess"}, 0},
			{"existing id, internal token only", "rfs-a", "", internal, 0},
			{"unknown id, internal token", "rfs-unknown", "", internal, http.StatusNotFound},
			{"valid token", "rfs-a", tokA, nil, http.StatusOK},
			{"valid token, not ready", "rfs-building", tokA, nil, http.StatusNotFound},
			{"valid token, no bytes", "rfs-nobytes", tokA, nil, http.StatusNotFound},
		} {
			rec := do(t, h, call{method: method, target: dlURL(tc.id, tc.token), header: tc.header})
			if tc.want != 0 {
				if rec.Code != tc.want {
					t.Errorf("%s %s: %d %q, want %d", method, tc.name, rec.Code, rec.Body.String(), tc.want)
				}
				continue
			}
			if rec.Code != refused {
				t.Errorf("%s %s: %d %q, want %d", method, tc.name, rec.Code, rec.Body.String(), refused)
			}
			if first == nil {
				first = rec
				continue
			}
			if rec.Code != first.Code || rec.Body.String() != first.Body.String() || rec.Header().Get("Content-Length") != first.Header().Get("Content-Length") {
				t.Errorf("%s %s: %d %q; the first refusal was %d %q: the answers tell them apart",
					method, tc.name, rec.Code, rec.Body.String(), first.Code, first.Body.String())
			}
		}
	}
	for _, secret := range []string{tokA, testToken, "guess"} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the data plane logged a token (%q):\n%s", secret, logs.String())
		}
	}
	// The operator's log tells the refusals apart.
	for _, reason := range []string{`"reason":"unknown artifact"`, `"reason":"missing or wrong download token"`} {
		if !strings.Contains(logs.String(), reason) {
			t.Errorf("no refusal logged with %s:\n%s", reason, logs.String())
		}
	}
}

// TestDownloadTokensAreDerived: with tokens keyed by the callback token
// (as the apps run), the row's column holds a seed and only the token
// derived from it downloads: the column value, which a copy of the
// database shows, is refused, and so is an upstream row's token in the
// clear (such rows get a seed when the data plane starts). Before, the
// column held the token itself, and a read-only dump downloaded every
// artifact.
func TestDownloadTokensAreDerived(t *testing.T) {
	st := fileStore(t)
	put(t, st, core.ArtifactObjectKey("rfs-a"), []byte("bytes of a"))
	put(t, st, core.ArtifactObjectKey("rfs-up"), []byte("upstream's bytes"))
	tokens := core.NewDownloadTokens(testToken)
	seed := core.NewDownloadSeed("0123456789abcdef")
	lookup := &fakeLookup{rows: map[string]*core.Artifact{
		"rfs-a":  {ArtifactID: "rfs-a", Status: core.ArtifactReady, DownloadToken: seed},
		"rfs-up": {ArtifactID: "rfs-up", Status: core.ArtifactReady, DownloadToken: "2b1f0c7e-upstream-uuid"},
	}}
	h := New(Config{Token: testToken, Artifacts: lookup, Store: st, DownloadTokens: tokens})
	for _, tc := range []struct {
		name, id, token string
		want            int
	}{
		{"the derived token", "rfs-a", tokens.For("rfs-a", seed), http.StatusOK},
		{"the column value (a dump)", "rfs-a", seed, http.StatusForbidden},
		{"a token derived with another key", "rfs-a", core.NewDownloadTokens("another-callback-token").For("rfs-a", seed), http.StatusForbidden},
		{"an upstream row's clear token (a dump)", "rfs-up", "2b1f0c7e-upstream-uuid", http.StatusForbidden},
	} {
		rec := do(t, h, call{method: http.MethodGet, target: dlURL(tc.id, ""), header: map[string]string{core.DownloadTokenHeader: tc.token}})
		if rec.Code != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, rec.Code, tc.want)
		}
	}
}
