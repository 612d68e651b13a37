package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
)

const (
	cliBearer = "cli-bearer-token-0123456789"
	cliUser   = "ops"
	cliSecret = "cli-secret-key-0123456789"
)

// startAuthenticated runs the fake master behind the real public API
// check: a request without valid credentials gets 130401.
func startAuthenticated(t *testing.T) []string {
	t.Helper()
	f := &fakeMaster{t: t, polls: map[string]int{}}
	p := auth.NewPublic(auth.PublicConfig{BearerTokens: []string{cliBearer}, SecretKeys: map[string]string{cliUser: cliSecret}})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := p.Check(r); err != nil {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"ret":{"ret_code":130401,"ret_msg":"`+err.Error()+`"}}`)
			return
		}
		f.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	host, port, err := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	return []string{"-a", host, "-p", port}
}

// TestCLICredentials: the CLI sends a bearer token ($CUBE_MASTER_TOKEN or
// --token) or signs every request (--user-id / $CUBE_MASTER_USER_ID with
// $CUBE_MASTER_SECRET_KEY or --secret-key), each with a fresh nonce; the
// secret flags warn; no secret is ever printed; a refusal names the
// variables to set.
func TestCLICredentials(t *testing.T) {
	for _, env := range []string{EnvToken, EnvUserID, EnvSecretKey} {
		t.Setenv(env, "")
	}
	tests := []struct {
		name      string
		env       map[string]string
		args      []string
		code      int
		stderrHas string
	}{
		{"no credentials", nil, nil, 1, "set $" + EnvToken},
		{"bearer from the environment", map[string]string{EnvToken: cliBearer}, nil, 0, ""},
		{"bearer flag warns", nil, []string{"--token", cliBearer}, 0, "--token is visible"},
		{"wrong bearer", map[string]string{EnvToken: "wrong-token-0123456789"}, nil, 1, "ret_code 130401"},
		{"signed from the environment", map[string]string{EnvUserID: cliUser, EnvSecretKey: cliSecret}, nil, 0, ""},
		{"signed with flags", nil, []string{"--user-id", cliUser, "--secret-key", cliSecret}, 0, "--secret-key is visible"},
		{"signed with a flag user and the environment's key", map[string]string{EnvSecretKey: cliSecret}, []string{"--user-id", cliUser}, 0, ""},
		{"wrong secret key", map[string]string{EnvUserID: cliUser, EnvSecretKey: "not-the-key"}, nil, 1, "ret_code 130401"},
		{"user id without a key and no terminal", map[string]string{EnvUserID: cliUser}, nil, 1, "set $" + EnvSecretKey},
		{"both kinds by flag", nil, []string{"--token", cliBearer, "--user-id", cliUser}, 1, "not both"},
		{"a flag wins over the other kind's variable", map[string]string{EnvToken: "stale-token-0123456789"}, []string{"--user-id", cliUser, "--secret-key", cliSecret}, 0, "--secret-key is visible"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			global := startAuthenticated(t)
			// tpl list reads the list; tpl info also reads the list to
			// resolve its argument: several signed requests per run.
			for _, cmd := range [][]string{{"tpl", "list"}, {"tpl", "info", "tpl-1"}} {
				r := runCLI(t, append(global, tc.args...), cmd...)
				if r.code != tc.code {
					t.Fatalf("%v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", cmd, r.code, tc.code, r.stdout, r.stderr)
				}
				if tc.stderrHas != "" && !strings.Contains(r.stderr, tc.stderrHas) {
					t.Fatalf("%v: stderr %q lacks %q", cmd, r.stderr, tc.stderrHas)
				}
				if tc.stderrHas == "" && r.stderr != "" {
					t.Fatalf("%v: stderr %q, want empty", cmd, r.stderr)
				}
				for _, secret := range []string{cliBearer, cliSecret} {
					if strings.Contains(r.stdout+r.stderr, secret) {
						t.Fatalf("%v printed a secret:\n%s\n%s", cmd, r.stdout, r.stderr)
					}
				}
			}
		})
	}
}

// TestSignedRequestsCarryFreshNonces: two requests signed back to back
// both pass a master that refuses replayed nonces.
func TestSignedRequestsCarryFreshNonces(t *testing.T) {
	p := auth.NewPublic(auth.PublicConfig{SecretKeys: map[string]string{cliUser: cliSecret}})
	c := credentials{userID: cliUser, secret: cliSecret}
	seen := map[string]bool{}
	for range 3 {
		r := httptest.NewRequest(http.MethodGet, "/cube/template", nil)
		if err := c.apply(r); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Check(r); err != nil {
			t.Fatalf("signed request refused: %v", err)
		}
		n := r.Header.Get(auth.HeaderNonce)
		if seen[n] {
			t.Fatalf("nonce %s reused", n)
		}
		seen[n] = true
	}
}
