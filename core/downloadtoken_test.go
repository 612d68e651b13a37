package core

import (
	"strings"
	"testing"
)

// TestDownloadTokens: the column holds a seed; the token is derived from
// the seed, the artifact id and a key from the callback token, so neither
// the column value nor a token of another artifact or key opens it. An
// upstream value (no seed prefix) is handed out as it is but never
// accepted when keyed.
func TestDownloadTokens(t *testing.T) {
	d := NewDownloadTokens("callback-token-0123456789")
	other := NewDownloadTokens("another-callback-token-0000")
	seed := NewDownloadSeed(strings.Repeat("ab", 32))
	tok := d.For("rfs-a", seed)
	if !strings.HasPrefix(tok, "dt1.") || strings.Contains(tok, seed) || tok == seed {
		t.Fatalf("token %q of seed %q", tok, seed)
	}
	if d.For("rfs-a", seed) != tok {
		t.Fatal("tokens are not stable")
	}
	for _, tc := range []struct {
		name, id, stored, token string
		want                    bool
	}{
		{"the derived token", "rfs-a", seed, tok, true},
		{"the seed itself (a dump)", "rfs-a", seed, seed, false},
		{"another artifact's token", "rfs-b", seed, tok, false},
		{"another key's token", "rfs-a", seed, other.For("rfs-a", seed), false},
		{"a token of another seed", "rfs-a", NewDownloadSeed("cd"), tok, false},
		{"upstream's clear value", "rfs-a", "3f2a-uuid", "3f2a-uuid", false},
		{"empty token", "rfs-a", seed, "", false},
		{"empty column", "rfs-a", "", "", false},
		{"a bare prefix", "rfs-a", "dk1.", d.For("rfs-a", "dk1."), false},
	} {
		if got := d.Valid(tc.id, tc.stored, tc.token); got != tc.want {
			t.Errorf("%s: Valid = %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := d.For("rfs-a", "3f2a-uuid"); got != "3f2a-uuid" {
		t.Errorf("upstream's value handed out as %q", got)
	}

	var clear DownloadTokens // no callback token: upstream's behaviour
	if clear.Keyed() || NewDownloadTokens(" ").Keyed() {
		t.Fatal("no secret, yet keyed")
	}
	if clear.For("rfs-a", seed) != seed || !clear.Valid("rfs-a", seed, seed) || clear.Valid("rfs-a", seed, "x") || clear.Valid("rfs-a", "", "") {
		t.Fatal("without a key the column value is the token")
	}
}
