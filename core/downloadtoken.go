package core

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"strings"
)

// Download tokens. An artifact row's download_token column holds a seed
// ("dk1." + random hex), never the token itself: the token a node
// downloads with is an HMAC of the artifact id and the seed under a key
// both services derive from the shared callback token, computed when a
// URL is handed out and when a download is checked. A copy of the database
// alone therefore downloads nothing.
//
// A column value without the seed prefix was written by upstream (an
// adopted row, or a row an upstream template center keeps): it is the
// token itself. Our master hands it out as it is, so an upstream template
// center, which compares the column, keeps serving its rows; our data
// plane gives such rows a seed when it starts and never accepts the
// value as a token.
const (
	downloadSeedPrefix  = "dk1."
	downloadTokenPrefix = "dt1."
)

// NewDownloadSeed makes the column value of a fresh download token from
// random (an unguessable string, ports.IDs.NewToken).
func NewDownloadSeed(random string) string { return downloadSeedPrefix + random }

// IsDownloadSeed reports whether a download_token column value is a seed
// of ours (else it is upstream's token in the clear, or empty).
func IsDownloadSeed(stored string) bool {
	return strings.HasPrefix(stored, downloadSeedPrefix) && len(stored) > len(downloadSeedPrefix)
}

// DownloadTokens derives download tokens from seeds. The zero value has
// no key: it hands out and accepts the column value itself, as upstream
// does (only for a service run without a callback token, which
// CUBE_TEMPLATE_CALLBACK_INSECURE_NO_TOKEN allows, never in production).
type DownloadTokens struct {
	key []byte
}

// NewDownloadTokens derives the key from the shared callback token; ""
// gives the zero value.
func NewDownloadTokens(callbackToken string) DownloadTokens {
	secret := strings.TrimSpace(callbackToken)
	if secret == "" {
		return DownloadTokens{}
	}
	key, err := hkdf.Key(sha256.New, []byte(secret), nil, "cubetemplatecenter download tokens v1", 32)
	if err != nil {
		panic("core: hkdf: " + err.Error()) // only for a length sha256 cannot give
	}
	return DownloadTokens{key: key}
}

// Keyed reports whether tokens are derived (a key is set).
func (d DownloadTokens) Keyed() bool { return len(d.key) > 0 }

// For returns the token of an artifact whose column holds stored: derived
// from a seed when keyed, else stored itself ("" for none).
func (d DownloadTokens) For(artifactID, stored string) string {
	if !d.Keyed() || !IsDownloadSeed(stored) {
		return stored
	}
	m := hmac.New(sha256.New, d.key)
	m.Write([]byte(artifactID))
	m.Write([]byte{0})
	m.Write([]byte(stored))
	return downloadTokenPrefix + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Valid reports whether token opens the artifact whose column holds
// stored, in time independent of where they differ. Keyed, only a seed's
// derived token does: the column value itself never does, nor does an
// upstream value. Without a key, the column value does. An empty token
// or column never matches.
func (d DownloadTokens) Valid(artifactID, stored, token string) bool {
	want := stored
	if d.Keyed() {
		if !IsDownloadSeed(stored) {
			want = ""
		} else {
			want = d.For(artifactID, stored)
		}
	}
	// Hash both so the comparison takes the same time whatever the lengths.
	g, w := sha256.Sum256([]byte(token)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1 && token != "" && want != ""
}
