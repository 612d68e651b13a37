package data_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/store/memstore"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/data"
)

type countingIDs struct{ n int }

func (c *countingIDs) NewJobID() string { return "job" }
func (c *countingIDs) NewHex() string   { return "hex" }
func (c *countingIDs) NewToken() string { c.n++; return fmt.Sprintf("fresh-%d", c.n) }

// TestSeedDownloadTokens: a READY row whose column holds a token in the
// clear (adopted from upstream) gets a seed, so the old value, which a
// copy of the database shows, opens nothing; rows with a seed, without a
// token or not READY are left alone.
func TestSeedDownloadTokens(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	rows := []struct {
		id, token string
		status    core.ArtifactStatus
		reseeded  bool
	}{
		{"rfs-upstream", "6f1c2b9e-uuid-of-upstream", core.ArtifactReady, true},
		{"rfs-seeded", core.NewDownloadSeed("abc"), core.ArtifactReady, false},
		{"rfs-none", "", core.ArtifactReady, false},
		{"rfs-failed", "old-clear-token", core.ArtifactFailed, false},
	}
	for _, r := range rows {
		if err := st.Artifacts().Create(ctx, &core.Artifact{ArtifactID: r.id, Fingerprint: "fp-" + r.id, DownloadToken: r.token, Status: r.status}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := data.SeedDownloadTokens(ctx, st, &countingIDs{})
	if err != nil || n != 1 {
		t.Fatalf("SeedDownloadTokens = %d, %v; want 1", n, err)
	}
	tokens := core.NewDownloadTokens("callback-token-of-the-test")
	for _, r := range rows {
		a, err := st.Artifacts().Get(ctx, r.id)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case r.reseeded:
			if !core.IsDownloadSeed(a.DownloadToken) || tokens.Valid(r.id, a.DownloadToken, r.token) {
				t.Errorf("%s: column %q; the old value must open nothing", r.id, a.DownloadToken)
			}
			if !tokens.Valid(r.id, a.DownloadToken, tokens.For(r.id, a.DownloadToken)) {
				t.Errorf("%s: the derived token does not open it", r.id)
			}
		case a.DownloadToken != r.token:
			t.Errorf("%s: column changed %q -> %q", r.id, r.token, a.DownloadToken)
		}
	}
	if n, err := data.SeedDownloadTokens(ctx, st, &countingIDs{}); err != nil || n != 0 {
		t.Fatalf("a second pass changed %d rows (%v)", n, err)
	}
}
