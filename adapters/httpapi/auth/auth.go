package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/core"
)

// Header carries the shared token on internal requests.
const Header = "X-Cube-Template-Callback-Token"

// Env names, for messages.
const (
	EnvToken    = "CUBE_TEMPLATE_CALLBACK_TOKEN"
	EnvInsecure = "CUBE_TEMPLATE_CALLBACK_INSECURE_NO_TOKEN"
)

// ErrNoSecret is returned by CheckConfig when no token is configured and the
// insecure opt-in is off.
var ErrNoSecret = errors.New(EnvToken + " is not set; refusing to serve internal routes without a shared secret (set " + EnvInsecure + "=true only for single-binary development)")

// CheckConfig is called by the apps at startup: it fails unless a token is
// configured or insecure mode is explicitly enabled.
func CheckConfig(token string, insecure bool) error {
	if strings.TrimSpace(token) == "" && !insecure {
		return ErrNoSecret
	}
	return nil
}

// macKey is drawn once per process; digests are only compared with each
// other, never stored or sent, so it need not be shared.
var macKey = func() []byte {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		panic("auth: no randomness: " + err.Error())
	}
	return k
}()

func digest(s string) []byte {
	m := hmac.New(sha256.New, macKey)
	m.Write([]byte(s))
	return m.Sum(nil)
}

// Equal reports whether got equals want, in time independent of their
// contents and lengths. An empty value on either side never matches.
func Equal(got, want string) bool {
	// Digest both before looking at emptiness so the work done is the same.
	eq := hmac.Equal(digest(got), digest(want))
	return eq && got != "" && want != ""
}

// Middleware returns the token check for internal routes:
//
//   - token configured: a request whose header equals it passes; a missing
//     or different header gets 401.
//   - no token, insecure: every request passes.
//   - no token, not insecure: every request gets 503 (misconfiguration).
//
// Rejections are JSON {"error": "..."} with real HTTP statuses, never 200.
func Middleware(token string, insecure bool) func(http.Handler) http.Handler {
	token = strings.TrimSpace(token)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case token == "" && insecure:
				next.ServeHTTP(w, r)
			case token == "":
				reject(w, r, http.StatusServiceUnavailable, "callback token is not configured on this server ("+EnvToken+")")
			case !Equal(r.Header.Get(Header), token):
				reject(w, r, http.StatusUnauthorized, "missing or invalid "+Header)
			default:
				next.ServeHTTP(w, r)
			}
		})
	}
}

// reject answers a refused internal request. The route never reads the
// body, so the connection is closed after the answer rather than drained.
func reject(w http.ResponseWriter, r *http.Request, status int, msg string) {
	wire.CloseAfterRefusal(w, r)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// SingleHeaders are the headers that carry a credential: the internal
// token, an artifact's download token and the public API's (see
// CredentialHeaders). Each may come once in a request.
var SingleHeaders = append([]string{Header, core.DownloadTokenHeader}, CredentialHeaders...)

// RepeatedCredential returns the first of SingleHeaders that h carries
// more than once, or "".
func RepeatedCredential(h http.Header) string {
	for _, name := range SingleHeaders {
		if len(h.Values(name)) > 1 {
			return name
		}
	}
	return ""
}

// SingleCredentials refuses, before any route sees it, a request that
// carries a credential header more than once: which of two Authorization
// headers counts is for each reader to decide (net/http's Get takes the
// first, a proxy in front may take the last), so such a request is never
// judged. refuse writes the answer (a 400 naming the header); the
// connection is closed after it without reading the body.
func SingleCredentials(refuse func(w http.ResponseWriter, r *http.Request, msg string)) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if name := RepeatedCredential(r.Header); name != "" {
				wire.CloseAfterRefusal(w, r)
				refuse(w, r, "the "+http.CanonicalHeaderKey(name)+" header is sent more than once; send it once")
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
