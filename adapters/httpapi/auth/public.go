package auth

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cubesandbox/templatecenter/core"
)

// The signed headers of upstream CubeMaster's public API. Go canonicalizes
// them (Cube_user_id); proxies that drop header names with underscores
// (nginx's default) must be told to keep them.
const (
	HeaderVersion   = "cube_version"
	HeaderUserID    = "cube_user_id"
	HeaderTimestamp = "cube_timestamp"
	HeaderNonce     = "cube_nonce"
	HeaderMethod    = "cube_sgn_method"
	HeaderSignature = "cube_signature"
)

// Signature scheme values.
const (
	// SignatureVersion is the only version upstream accepts; an empty
	// cube_version means it.
	SignatureVersion = "2023"
	// MethodSHA1 (the default for an empty cube_sgn_method) and
	// MethodSHA256 are the HMACs upstream accepts.
	MethodSHA1   = "sha1"
	MethodSHA256 = "sha256"
	// DefaultExpiry is how far a timestamp may be from now, either way
	// (upstream auth.signature_expire_time_insec).
	DefaultExpiry = 120 * time.Second
)

// Env names of the public API's settings, for messages.
const (
	EnvAuth         = "CUBE_MASTER_AUTH"
	EnvSecretKeys   = "CUBE_MASTER_AUTH_SECRET_KEYS"
	EnvBearerTokens = "CUBE_MASTER_AUTH_BEARER_TOKENS"
	EnvExpiry       = "CUBE_MASTER_AUTH_EXPIRY"
)

// Bounds that keep a caller from making the replay cache large.
const (
	maxIDLen = 128
	// DefaultMaxNonces bounds the nonces remembered at once, over every
	// user.
	DefaultMaxNonces = 1 << 16
	// MinBearerLen is the shortest bearer token accepted in configuration.
	MinBearerLen = 16
)

// ErrNoCredentials is returned by CheckPublicConfig when authentication is
// on and nothing could ever pass it.
var ErrNoCredentials = errors.New(EnvAuth + " is on but no credential is configured: set " + EnvBearerTokens +
	" (e.g. `openssl rand -hex 32`) or " + EnvSecretKeys + " (user=secret,...; or auth.secret_key_map in upstream's conf.yaml), or " +
	EnvAuth + "=false to serve the public /cube/* API without authentication")

// Error is a refused public request. It wraps core.ErrUnauthenticated
// (130401), or core.ErrBusy when the replay cache is full. Reason never
// holds a secret or a signature.
type Error struct {
	Reason string
	busy   bool
}

func (e *Error) Error() string {
	if e.busy {
		return "authentication unavailable: " + e.Reason
	}
	return "authentication failed: " + e.Reason
}

// Unwrap maps the refusal onto core's sentinels.
func (e *Error) Unwrap() error {
	if e.busy {
		return core.ErrBusy
	}
	return core.ErrUnauthenticated
}

func refuse(format string, args ...any) error { return &Error{Reason: fmt.Sprintf(format, args...)} }

// PublicConfig configures the public API's authentication.
type PublicConfig struct {
	// SecretKeys maps a cube_user_id to its secret key (signed headers).
	SecretKeys map[string]string
	// BearerTokens are accepted in Authorization: Bearer <token>.
	BearerTokens []string
	// Expiry bounds |now - cube_timestamp| (DefaultExpiry when zero).
	Expiry time.Duration
	// MaxNonces bounds the replay cache (DefaultMaxNonces when zero).
	MaxNonces int
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// CheckPublicConfig is called by the apps at start-up: with
// authentication on, at least one credential must be configured, bearer
// tokens must not be short, and no secret key may be empty.
func CheckPublicConfig(enabled bool, secretKeys map[string]string, bearerTokens []string) error {
	if !enabled {
		return nil
	}
	tokens := 0
	for _, t := range bearerTokens {
		switch t = strings.TrimSpace(t); {
		case t == "":
		case len(t) < MinBearerLen:
			return fmt.Errorf("%s: a token is %d characters, want at least %d (e.g. `openssl rand -hex 32`)", EnvBearerTokens, len(t), MinBearerLen)
		default:
			tokens++
		}
	}
	for user, secret := range secretKeys {
		if strings.TrimSpace(user) == "" || strings.TrimSpace(secret) == "" {
			return fmt.Errorf("%s: user %q has an empty user id or secret key", EnvSecretKeys, user)
		}
	}
	if tokens == 0 && len(secretKeys) == 0 {
		return ErrNoCredentials
	}
	return nil
}

// Caller is who a public request authenticated as.
type Caller struct {
	// Scheme is "bearer" or "signature".
	Scheme string
	// UserID is the cube_user_id of a signed request ("" for bearer).
	UserID string
}

type callerKey struct{}

// WithCaller records an authenticated caller in ctx.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the caller Public.Check authenticated, if any.
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// Public checks public API requests: a bearer token or upstream's signed
// headers. It is safe for concurrent use.
type Public struct {
	keys   map[string][]byte
	tokens [][]byte
	expiry time.Duration
	now    func() time.Time
	nonces *nonceCache
	// dummy is signed with when the user is unknown, so that case costs
	// the same as a wrong signature.
	dummy []byte
}

// NewPublic builds the checker. Empty tokens and keys are dropped.
func NewPublic(c PublicConfig) *Public {
	p := &Public{keys: map[string][]byte{}, expiry: c.Expiry, now: c.Now, dummy: make([]byte, 32)}
	if p.expiry <= 0 {
		p.expiry = DefaultExpiry
	}
	if p.now == nil {
		p.now = time.Now
	}
	for user, secret := range c.SecretKeys {
		if user != "" && secret != "" {
			p.keys[user] = []byte(secret)
		}
	}
	for _, t := range c.BearerTokens {
		if t = strings.TrimSpace(t); t != "" {
			p.tokens = append(p.tokens, digest(t))
		}
	}
	p.nonces = newNonceCache(c.MaxNonces)
	return p
}

// Check authenticates r. A request with an Authorization: Bearer header is
// judged by it alone; otherwise the signed headers are required. The error
// is an *Error.
func (p *Public) Check(r *http.Request) (Caller, error) {
	if scheme, cred, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " "); ok && strings.EqualFold(scheme, "bearer") {
		if p.bearerOK(strings.TrimSpace(cred)) {
			return Caller{Scheme: "bearer"}, nil
		}
		return Caller{}, refuse("invalid bearer token")
	}
	h := r.Header
	if h.Get(HeaderSignature) == "" && h.Get(HeaderUserID) == "" {
		return Caller{}, refuse("no credentials: send Authorization: Bearer <token> or the signed %s, %s, %s and %s headers",
			HeaderUserID, HeaderTimestamp, HeaderNonce, HeaderSignature)
	}
	return p.checkSigned(h)
}

// bearerOK compares cred with every configured token, in time independent
// of which (if any) matches.
func (p *Public) bearerOK(cred string) bool {
	got := digest(cred)
	match := 0
	for _, want := range p.tokens {
		if hmac.Equal(got, want) {
			match |= 1
		}
	}
	return match == 1 && cred != ""
}

func (p *Public) checkSigned(h http.Header) (Caller, error) {
	version, user, ts, nonce, method, sig := h.Get(HeaderVersion), h.Get(HeaderUserID), h.Get(HeaderTimestamp),
		h.Get(HeaderNonce), h.Get(HeaderMethod), h.Get(HeaderSignature)
	for _, f := range []struct{ name, v string }{{HeaderUserID, user}, {HeaderTimestamp, ts}, {HeaderNonce, nonce}, {HeaderSignature, sig}} {
		if f.v == "" {
			return Caller{}, refuse("missing %s header", f.name)
		}
	}
	if len(user) > maxIDLen || len(nonce) > maxIDLen {
		return Caller{}, refuse("%s or %s longer than %d bytes", HeaderUserID, HeaderNonce, maxIDLen)
	}
	if version == "" {
		version = SignatureVersion
	}
	if version != SignatureVersion {
		return Caller{}, refuse("%s must be %s (or empty)", HeaderVersion, SignatureVersion)
	}
	if method == "" {
		method = MethodSHA1
	}
	var mac func() hash.Hash
	switch method {
	case MethodSHA1:
		mac = sha1.New
	case MethodSHA256:
		mac = sha256.New
	default:
		return Caller{}, refuse("%s must be %s or %s (or empty)", HeaderMethod, MethodSHA1, MethodSHA256)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return Caller{}, refuse("%s is not unix seconds", HeaderTimestamp)
	}
	now := p.now()
	if d := now.Sub(time.Unix(sec, 0)); d > p.expiry || d < -p.expiry {
		return Caller{}, refuse("%s is more than %s from the server's clock", HeaderTimestamp, p.expiry)
	}
	key, known := p.keys[user]
	if !known {
		key = p.dummy
	}
	want := signWith(mac, key, version, user, ts, nonce, method)
	// Known or not, the same work; one message for both, so user ids
	// cannot be probed.
	if !Equal(sig, want) || !known {
		return Caller{}, refuse("the signature does not match (unknown %s or wrong secret key)", HeaderUserID)
	}
	switch p.nonces.claim(user, nonce, now, now.Add(2*p.expiry)) {
	case nonceReplayed:
		return Caller{}, refuse("%s was already used", HeaderNonce)
	case nonceFull:
		return Caller{}, &Error{Reason: "too many signed requests in the replay window; retry later", busy: true}
	}
	return Caller{Scheme: "signature", UserID: user}, nil
}

// Sign is upstream's signature: base64 (standard) of HMAC-method(secret,
// version.userID.timestamp.nonce.method). An unknown method signs with
// SHA-1, as an empty one does.
func Sign(secret, version, userID, timestamp, nonce, method string) string {
	mac := sha1.New
	if method == MethodSHA256 {
		mac = sha256.New
	}
	return signWith(mac, []byte(secret), version, userID, timestamp, nonce, method)
}

func signWith(mac func() hash.Hash, key []byte, version, userID, timestamp, nonce, method string) string {
	m := hmac.New(mac, key)
	m.Write([]byte(version + "." + userID + "." + timestamp + "." + nonce + "." + method))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// SetSigned sets the signed headers on h for userID with secret, at now,
// with nonce and method (sha256 when empty).
func SetSigned(h http.Header, userID, secret, nonce, method string, now time.Time) {
	if method == "" {
		method = MethodSHA256
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	h.Set(HeaderVersion, SignatureVersion)
	h.Set(HeaderUserID, userID)
	h.Set(HeaderTimestamp, ts)
	h.Set(HeaderNonce, nonce)
	h.Set(HeaderMethod, method)
	h.Set(HeaderSignature, Sign(secret, SignatureVersion, userID, ts, nonce, method))
}

// CredentialHeaders are the request headers that carry public API
// credentials; proxies drop them before forwarding.
var CredentialHeaders = []string{"Authorization", HeaderSignature, HeaderNonce, HeaderTimestamp, HeaderUserID, HeaderMethod, HeaderVersion}

type claimResult int

const (
	nonceFresh claimResult = iota
	nonceReplayed
	nonceFull
)

// nonceCache remembers the nonces of verified signed requests until their
// timestamps can no longer pass (a timestamp is at most expiry ahead of
// the clock, so 2×expiry after it was seen). Entries are kept in the order
// they were added, which is also the order they expire in, so pruning
// looks only at the front. It holds at most max entries.
type nonceCache struct {
	mu    sync.Mutex
	max   int
	seen  map[string]struct{}
	queue []nonceEntry
	head  int
}

type nonceEntry struct {
	key   string
	until time.Time
}

func newNonceCache(max int) *nonceCache {
	if max <= 0 {
		max = DefaultMaxNonces
	}
	return &nonceCache{max: max, seen: map[string]struct{}{}}
}

// claim records (user, nonce) until until, unless it is already there or
// the cache is full of entries that have not expired.
func (c *nonceCache) claim(user, nonce string, now, until time.Time) claimResult {
	key := user + "\x00" + nonce
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.head < len(c.queue) && !c.queue[c.head].until.After(now) {
		delete(c.seen, c.queue[c.head].key)
		c.queue[c.head] = nonceEntry{}
		c.head++
	}
	if c.head > len(c.queue)/2 {
		c.queue = slices.Clone(c.queue[c.head:])
		c.head = 0
	}
	if _, dup := c.seen[key]; dup {
		return nonceReplayed
	}
	if len(c.seen) >= c.max {
		return nonceFull
	}
	c.seen[key] = struct{}{}
	c.queue = append(c.queue, nonceEntry{key: key, until: until})
	return nonceFresh
}

// size is the number of nonces remembered (tests).
func (c *nonceCache) size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}
