package auth

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
)

const (
	testUser   = "alice"
	testSecret = "alice-secret-key-0123"
	testBearer = "bearer-token-0123456789abcdef"
)

var testNow = time.Unix(1_750_000_000, 0)

func newTestPublic() *Public {
	return NewPublic(PublicConfig{
		SecretKeys:   map[string]string{testUser: testSecret, "bob": "bob-secret-key-0123"},
		BearerTokens: []string{"other-token-0123456789abcdef", testBearer},
		Now:          func() time.Time { return testNow },
	})
}

// refSign is the signature computed independently of Sign, from the
// scheme's definition.
func refSign(secret, version, user, ts, nonce, method string) string {
	h := sha1.New
	if method == "sha256" {
		h = sha256.New
	}
	m := hmac.New(h, []byte(secret))
	m.Write([]byte(strings.Join([]string{version, user, ts, nonce, method}, ".")))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

type signed struct {
	version, user, ts, nonce, method, sig string
	omit                                  string // a header left out
}

func sig(secret, method string, at time.Time, nonce string) signed {
	ts := strconv.FormatInt(at.Unix(), 10)
	v := "2023"
	s := signed{version: v, user: testUser, ts: ts, nonce: nonce, method: method}
	signMethod := method
	if signMethod == "" {
		signMethod = "sha1"
	}
	s.sig = refSign(secret, v, testUser, ts, nonce, signMethod)
	return s
}

func (s signed) apply(h http.Header) {
	for k, v := range map[string]string{HeaderVersion: s.version, HeaderUserID: s.user, HeaderTimestamp: s.ts,
		HeaderNonce: s.nonce, HeaderMethod: s.method, HeaderSignature: s.sig} {
		if k != s.omit && v != "" {
			h.Set(k, v)
		}
	}
}

// TestPublicCheck is the authentication table: upstream's signed headers
// (valid SHA-1 and SHA-256, wrong secret, unknown user, missing headers,
// stale and future timestamps, wrong version or method), bearer tokens,
// and the refusal's type.
func TestPublicCheck(t *testing.T) {
	exp := DefaultExpiry
	with := func(s signed, f func(*signed)) signed { f(&s); return s }
	tests := []struct {
		name   string
		hdr    func(h http.Header)
		ok     bool
		scheme string
		reason string // in the refusal
	}{
		{"sha1 signature", sig(testSecret, "sha1", testNow, "n-1").apply, true, "signature", ""},
		{"sha256 signature", sig(testSecret, "sha256", testNow, "n-2").apply, true, "signature", ""},
		{"empty method means sha1", sig(testSecret, "", testNow, "n-3").apply, true, "signature", ""},
		{"empty version means 2023", with(sig(testSecret, "sha256", testNow, "n-4"), func(s *signed) { s.version = "" }).apply, true, "signature", ""},
		{"timestamp at the edge of the window", sig(testSecret, "sha256", testNow.Add(-exp), "n-5").apply, true, "signature", ""},
		{"timestamp ahead at the edge", sig(testSecret, "sha256", testNow.Add(exp), "n-6").apply, true, "signature", ""},
		{"wrong secret", sig("not-the-secret", "sha256", testNow, "n-7").apply, false, "", "signature does not match"},
		{"secret of another user", sig("bob-secret-key-0123", "sha256", testNow, "n-8").apply, false, "", "signature does not match"},
		{"unknown user", with(sig(testSecret, "sha256", testNow, "n-9"), func(s *signed) { s.user = "mallory" }).apply, false, "", "signature does not match"},
		{"unknown user signed with an all-zero key", func(h http.Header) {
			s := sig(string(make([]byte, 32)), "sha256", testNow, "n-23")
			s.user = "mallory"
			s.sig = refSign(string(make([]byte, 32)), "2023", "mallory", s.ts, s.nonce, "sha256")
			s.apply(h)
		}, false, "", "signature does not match"},
		{"unknown user with an empty key", func(h http.Header) {
			s := sig("", "sha256", testNow, "n-24")
			s.user = "mallory"
			s.sig = refSign("", "2023", "mallory", s.ts, s.nonce, "sha256")
			s.apply(h)
		}, false, "", "signature does not match"},
		{"signature of sha1 sent as sha256", with(sig(testSecret, "sha1", testNow, "n-10"), func(s *signed) { s.method = "sha256" }).apply, false, "", "signature does not match"},
		{"tampered nonce", with(sig(testSecret, "sha256", testNow, "n-11"), func(s *signed) { s.nonce = "n-11x" }).apply, false, "", "signature does not match"},
		{"tampered timestamp", with(sig(testSecret, "sha256", testNow, "n-12"), func(s *signed) { s.ts = strconv.FormatInt(testNow.Unix()-1, 10) }).apply, false, "", "signature does not match"},
		{"stale timestamp", sig(testSecret, "sha256", testNow.Add(-exp-time.Second), "n-13").apply, false, "", "from the server's clock"},
		{"future timestamp", sig(testSecret, "sha256", testNow.Add(exp+time.Second), "n-14").apply, false, "", "from the server's clock"},
		{"timestamp not a number", with(sig(testSecret, "sha256", testNow, "n-15"), func(s *signed) { s.ts = "soon" }).apply, false, "", "not unix seconds"},
		{"version 2024", with(sig(testSecret, "sha256", testNow, "n-16"), func(s *signed) { s.version = "2024" }).apply, false, "", HeaderVersion},
		{"method md5", with(sig(testSecret, "sha256", testNow, "n-17"), func(s *signed) { s.method = "md5" }).apply, false, "", HeaderMethod},
		{"missing signature", with(sig(testSecret, "sha256", testNow, "n-18"), func(s *signed) { s.omit = HeaderSignature }).apply, false, "", "missing " + HeaderSignature},
		{"missing user", with(sig(testSecret, "sha256", testNow, "n-19"), func(s *signed) { s.omit = HeaderUserID }).apply, false, "", "missing " + HeaderUserID},
		{"missing timestamp", with(sig(testSecret, "sha256", testNow, "n-20"), func(s *signed) { s.omit = HeaderTimestamp }).apply, false, "", "missing " + HeaderTimestamp},
		{"missing nonce", with(sig(testSecret, "sha256", testNow, "n-21"), func(s *signed) { s.omit = HeaderNonce }).apply, false, "", "missing " + HeaderNonce},
		{"oversized nonce", with(sig(testSecret, "sha256", testNow, strings.Repeat("n", 200)), func(*signed) {}).apply, false, "", "longer than"},
		{"no credentials at all", func(http.Header) {}, false, "", "no credentials"},
		{"bearer ok", func(h http.Header) { h.Set("Authorization", "Bearer "+testBearer) }, true, "bearer", ""},
		{"bearer scheme in any case", func(h http.Header) { h.Set("Authorization", "bearer "+testBearer) }, true, "bearer", ""},
		{"bearer wrong", func(h http.Header) { h.Set("Authorization", "Bearer nope-nope-nope-nope") }, false, "", "invalid bearer token"},
		{"bearer prefix of a token", func(h http.Header) { h.Set("Authorization", "Bearer "+testBearer[:20]) }, false, "", "invalid bearer token"},
		{"bearer empty", func(h http.Header) { h.Set("Authorization", "Bearer ") }, false, "", ""},
		{"bearer wrong does not fall back to a valid signature", func(h http.Header) {
			sig(testSecret, "sha256", testNow, "n-22").apply(h)
			h.Set("Authorization", "Bearer nope-nope-nope-nope")
		}, false, "", "invalid bearer token"},
		{"basic auth is no bearer", func(h http.Header) { h.Set("Authorization", "Basic "+testBearer) }, false, "", "no credentials"},
	}
	p := newTestPublic()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/cube/template", nil)
			tc.hdr(r.Header)
			c, err := p.Check(r)
			if tc.ok {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if c.Scheme != tc.scheme || (tc.scheme == "signature" && c.UserID != testUser) {
					t.Fatalf("caller %+v", c)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted as %+v", c)
			}
			var ae *Error
			if !errors.As(err, &ae) || !errors.Is(err, core.ErrUnauthenticated) {
				t.Fatalf("error %v is not an *Error wrapping core.ErrUnauthenticated", err)
			}
			if !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("error %q does not say %q", err, tc.reason)
			}
			for _, secret := range []string{testSecret, testBearer} {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("error %q holds a secret", err)
				}
			}
		})
	}
}

// TestSignMatchesTheScheme: Sign and SetSigned produce what the reference
// computation does, and what Check accepts.
func TestSignMatchesTheScheme(t *testing.T) {
	for _, m := range []string{"sha1", "sha256"} {
		if got, want := Sign(testSecret, "2023", testUser, "1700000000", "abc", m), refSign(testSecret, "2023", testUser, "1700000000", "abc", m); got != want {
			t.Errorf("%s: Sign = %s, want %s", m, got, want)
		}
	}
	p := newTestPublic()
	r := httptest.NewRequest(http.MethodGet, "/cube/template", nil)
	SetSigned(r.Header, testUser, testSecret, "set-signed-1", "", testNow)
	if r.Header.Get(HeaderMethod) != "sha256" {
		t.Errorf("SetSigned method %q, want sha256", r.Header.Get(HeaderMethod))
	}
	if _, err := p.Check(r); err != nil {
		t.Fatalf("SetSigned request refused: %v", err)
	}
}

// TestReplayedNonceRefused: a verified nonce cannot be used again by the
// same user within the window; another user may use the same string; a
// refused request does not burn its nonce; once the window has passed the
// entry is forgotten (and the timestamp could not pass anyway).
func TestReplayedNonceRefused(t *testing.T) {
	now := testNow
	p := NewPublic(PublicConfig{SecretKeys: map[string]string{testUser: testSecret, "bob": "bob-secret-key-0123"}, Now: func() time.Time { return now }})
	check := func(user, secret, nonce string) error {
		r := httptest.NewRequest(http.MethodGet, "/cube/template", nil)
		SetSigned(r.Header, user, secret, nonce, "sha256", now)
		_, err := p.Check(r)
		return err
	}
	if err := check(testUser, testSecret, "once"); err != nil {
		t.Fatal(err)
	}
	err := check(testUser, testSecret, "once")
	if err == nil || !strings.Contains(err.Error(), "already used") || !errors.Is(err, core.ErrUnauthenticated) {
		t.Fatalf("replay: %v", err)
	}
	if err := check("bob", "bob-secret-key-0123", "once"); err != nil {
		t.Fatalf("another user's nonce: %v", err)
	}
	if err := check(testUser, "wrong", "later"); err == nil {
		t.Fatal("wrong secret accepted")
	}
	if err := check(testUser, testSecret, "later"); err != nil {
		t.Fatalf("a refused request burnt its nonce: %v", err)
	}
	// The same exact request, replayed byte for byte, is refused too.
	r := httptest.NewRequest(http.MethodGet, "/cube/template", nil)
	SetSigned(r.Header, testUser, testSecret, "exact", "sha1", now)
	if _, err := p.Check(r); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Check(r.Clone(r.Context())); err == nil {
		t.Fatal("a byte-for-byte replay was accepted")
	}
	if p.nonces.size() != 4 {
		t.Fatalf("cache holds %d nonces, want 4", p.nonces.size())
	}
	now = now.Add(2*DefaultExpiry + time.Second)
	if err := check(testUser, testSecret, "after"); err != nil {
		t.Fatal(err)
	}
	if p.nonces.size() != 1 {
		t.Fatalf("cache holds %d nonces after the window, want 1 (the old ones pruned)", p.nonces.size())
	}
}

// TestReplayCacheIsBounded: a full cache of live nonces refuses new
// signed requests (busy, not accepted unchecked), and frees up as they
// expire.
func TestReplayCacheIsBounded(t *testing.T) {
	now := testNow
	p := NewPublic(PublicConfig{SecretKeys: map[string]string{testUser: testSecret}, MaxNonces: 3, Now: func() time.Time { return now }})
	check := func(nonce string) error {
		r := httptest.NewRequest(http.MethodGet, "/cube/template", nil)
		SetSigned(r.Header, testUser, testSecret, nonce, "sha256", now)
		_, err := p.Check(r)
		return err
	}
	for i := range 3 {
		if err := check("n" + strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	err := check("n3")
	if err == nil || !errors.Is(err, core.ErrBusy) {
		t.Fatalf("full cache: %v, want a busy refusal", err)
	}
	if p.nonces.size() != 3 {
		t.Fatalf("cache grew to %d", p.nonces.size())
	}
	now = now.Add(2*DefaultExpiry + time.Second)
	if err := check("n3"); err != nil {
		t.Fatalf("after expiry: %v", err)
	}
}

// TestCustomExpiry: the window is the configured one.
func TestCustomExpiry(t *testing.T) {
	p := NewPublic(PublicConfig{SecretKeys: map[string]string{testUser: testSecret}, Expiry: 10 * time.Second, Now: func() time.Time { return testNow }})
	for _, c := range []struct {
		off time.Duration
		ok  bool
	}{{10 * time.Second, true}, {-10 * time.Second, true}, {11 * time.Second, false}, {-11 * time.Second, false}} {
		r := httptest.NewRequest(http.MethodGet, "/cube/template", nil)
		SetSigned(r.Header, testUser, testSecret, "e"+c.off.String(), "sha1", testNow.Add(c.off))
		if _, err := p.Check(r); (err == nil) != c.ok {
			t.Errorf("offset %s: err %v, want ok=%v", c.off, err, c.ok)
		}
	}
}

func TestCheckPublicConfig(t *testing.T) {
	tests := []struct {
		name    string
		enabled bool
		keys    map[string]string
		tokens  []string
		wantErr string
	}{
		{"off needs nothing", false, nil, nil, ""},
		{"on without credentials fails closed", true, nil, nil, EnvAuth + "=false"},
		{"blank tokens are no credential", true, nil, []string{" ", ""}, EnvBearerTokens},
		{"a bearer token", true, nil, []string{testBearer}, ""},
		{"a short bearer token", true, nil, []string{"short"}, "at least"},
		{"a secret key", true, map[string]string{testUser: testSecret}, nil, ""},
		{"an empty secret key", true, map[string]string{testUser: ""}, nil, EnvSecretKeys},
	}
	for _, tc := range tests {
		err := CheckPublicConfig(tc.enabled, tc.keys, tc.tokens)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.wantErr)
		}
	}
	if err := CheckPublicConfig(true, nil, nil); !errors.Is(err, ErrNoCredentials) {
		t.Errorf("no credentials: %v does not wrap ErrNoCredentials", err)
	}
}
