package tcapi

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"testing"

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
