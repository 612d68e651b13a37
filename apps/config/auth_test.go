package config

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestAuthSettings: public API authentication is on by default with
// upstream's 120 s window; the environment sets the tokens (comma list),
// the keys (user=secret pairs or JSON) and the window; malformed keys are
// refused without quoting a secret.
func TestAuthSettings(t *testing.T) {
	c, err := Load(mapEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Master.Auth.Enabled || c.Master.Auth.Expiry != 120*time.Second {
		t.Fatalf("defaults %+v, want on with 120s", c.Master.Auth)
	}
	c, err = Load(mapEnv(map[string]string{
		"CUBE_MASTER_AUTH": "false", "CUBE_MASTER_AUTH_EXPIRY": "30s",
		"CUBE_MASTER_AUTH_BEARER_TOKENS": " tok-one-0123456789 , tok-two-0123456789 ",
		"CUBE_MASTER_AUTH_SECRET_KEYS":   "alice=s3cr=et, bob = key2",
	}))
	if err != nil {
		t.Fatal(err)
	}
	a := c.Master.Auth
	if a.Enabled || a.Expiry != 30*time.Second || !slices.Equal(a.BearerTokens, []string{"tok-one-0123456789", "tok-two-0123456789"}) ||
		!maps.Equal(a.SecretKeys, UserSecrets{"alice": "s3cr=et", "bob": "key2"}) {
		t.Fatalf("auth %+v", a)
	}
	c, err = Load(mapEnv(map[string]string{"CUBE_MASTER_AUTH_SECRET_KEYS": `{"carol":"k3"}`}))
	if err != nil || !maps.Equal(c.Master.Auth.SecretKeys, UserSecrets{"carol": "k3"}) {
		t.Fatalf("JSON keys: %v %v", c.Master.Auth.SecretKeys, err)
	}
	for _, bad := range []string{"alice", "alice=", "=hunter2", "alice=hunter2,alice=hunter3", `{"alice":1}`} {
		_, err := Load(mapEnv(map[string]string{"CUBE_MASTER_AUTH_SECRET_KEYS": bad}))
		if err == nil || !strings.Contains(err.Error(), "CUBE_MASTER_AUTH_SECRET_KEYS") {
			t.Errorf("%q: %v, want an error naming the setting", bad, err)
			continue
		}
		if strings.Contains(err.Error(), "hunter") {
			t.Errorf("%q: the error quotes the secret: %v", bad, err)
		}
	}
	if _, err := Load(mapEnv(map[string]string{"CUBE_MASTER_AUTH_EXPIRY": "0s"})); err == nil || !strings.Contains(err.Error(), "CUBE_MASTER_AUTH_EXPIRY") {
		t.Errorf("zero expiry: %v", err)
	}
	// The CLI's variables are known names, not typos of a setting.
	if w := UnknownVariables([]string{"CUBE_MASTER_TOKEN=x", "CUBE_MASTER_USER_ID=u", "CUBE_MASTER_SECRET_KEY=k"}); len(w) != 0 {
		t.Errorf("CLI variables reported as unknown: %v", w)
	}
}

// TestAuthSecretsAreRedacted: --print-config never shows a bearer token or
// a secret key.
func TestAuthSecretsAreRedacted(t *testing.T) {
	c, err := Load(mapEnv(map[string]string{"CUBE_MASTER_AUTH_BEARER_TOKENS": "bearer-secret-0123456789", "CUBE_MASTER_AUTH_SECRET_KEYS": "alice=key-secret-42"}))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Print(&b, &c, ControlPlane); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, secret := range []string{"bearer-secret-0123456789", "key-secret-42"} {
		if strings.Contains(out, secret) {
			t.Errorf("printed configuration shows %q:\n%s", secret, out)
		}
	}
	for _, name := range []string{"CUBE_MASTER_AUTH ", "CUBE_MASTER_AUTH_BEARER_TOKENS", "CUBE_MASTER_AUTH_SECRET_KEYS", "CUBE_MASTER_AUTH_EXPIRY"} {
		if !strings.Contains(out, name) {
			t.Errorf("printed configuration lacks %s", name)
		}
	}
}

// TestUpstreamAuthSection: upstream's conf.yaml auth section (enable,
// signature_expire_time_insec, secret_key_map with its groups merged) fills
// the settings; the environment wins; a user with two different keys is
// refused.
func TestUpstreamAuthSection(t *testing.T) {
	p := filepath.Join(t.TempDir(), "conf.yaml")
	write := func(body string) {
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("auth:\n  enable: true\n  signature_expire_time_insec: 300\n  secret_key_map:\n    team-a:\n      alice: ka\n    team-b:\n      bob: kb\n      alice: ka\n")
	c, err := Load(mapEnv(map[string]string{"CUBE_MASTER_CONFIG_PATH": p, "CUBE_TEMPLATE_CENTER_STRICT_CONFIG": "true"}))
	if err != nil {
		t.Fatal(err)
	}
	a := c.Master.Auth
	if !a.Enabled || a.Expiry != 300*time.Second || !maps.Equal(a.SecretKeys, UserSecrets{"alice": "ka", "bob": "kb"}) {
		t.Fatalf("auth %+v", a)
	}
	if src := c.Sources["CUBE_MASTER_AUTH_SECRET_KEYS"]; src != "file (upstream auth.secret_key_map)" {
		t.Errorf("source %q", src)
	}
	if w := strings.Join(c.Warnings, "\n"); strings.Contains(w, "auth.") {
		t.Errorf("auth keys reported as unused: %s", w)
	}
	c, err = Load(mapEnv(map[string]string{"CUBE_MASTER_CONFIG_PATH": p, "CUBE_MASTER_AUTH_SECRET_KEYS": "dave=kd", "CUBE_MASTER_AUTH": "false"}))
	if err != nil || c.Master.Auth.Enabled || !maps.Equal(c.Master.Auth.SecretKeys, UserSecrets{"dave": "kd"}) {
		t.Fatalf("environment lost: %+v %v", c.Master.Auth, err)
	}
	write("auth:\n  secret_key_map:\n    a:\n      alice: one-secret\n    b:\n      alice: other-secret\n")
	_, err = Load(mapEnv(map[string]string{"CUBE_MASTER_CONFIG_PATH": p}))
	if err == nil || !strings.Contains(err.Error(), "auth.secret_key_map") || strings.Contains(err.Error(), "secret\"") || strings.Contains(err.Error(), "one-secret") {
		t.Fatalf("conflicting keys: %v", err)
	}
	// Our own key wins over upstream's enable.
	write("master:\n  auth:\n    enabled: true\nauth:\n  enable: false\n")
	if c, err := Load(mapEnv(map[string]string{"CUBE_MASTER_CONFIG_PATH": p})); err != nil || !c.Master.Auth.Enabled {
		t.Fatalf("our key lost: %+v %v", c.Master.Auth, err)
	}
	// Upstream's shipped file turns it off, as upstream runs.
	c, err = Load(mapEnv(map[string]string{"CUBE_MASTER_CONFIG_PATH": "testdata/upstream-cubemaster.yaml"}))
	if err != nil || c.Master.Auth.Enabled || c.Sources["CUBE_MASTER_AUTH"] != "file (upstream auth.enable)" {
		t.Fatalf("upstream's auth.enable=false: %+v %q %v", c.Master.Auth, c.Sources["CUBE_MASTER_AUTH"], err)
	}
}
