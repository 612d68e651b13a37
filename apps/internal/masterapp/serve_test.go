package masterapp

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/apps/config"
)

func TestDownloadBaseURL(t *testing.T) {
	bound := &net.TCPAddr{IP: net.IPv6unspecified, Port: 43210}
	cases := []struct {
		configured, listen, want string
	}{
		{"", ":8089", "http://127.0.0.1:43210"},
		{"", "0.0.0.0:8089", "http://127.0.0.1:43210"},
		{"", "[::]:8089", "http://127.0.0.1:43210"},
		{"", "10.1.2.3:0", "http://10.1.2.3:43210"},
		{"", "[fd00::1]:8089", "http://[fd00::1]:43210"},
		{"", "master.internal:8089", "http://master.internal:43210"},
		{"http://10.0.0.9:8089/", ":8089", "http://10.0.0.9:8089"},
		{"10.0.0.9:8089", ":8089", "http://10.0.0.9:8089"},
		{"https://cube.example/api", ":8089", "https://cube.example/api"},
	}
	for _, tc := range cases {
		got, err := downloadBaseURL(tc.configured, tc.listen, bound)
		if err != nil || got != tc.want {
			t.Errorf("downloadBaseURL(%q, %q) = %q, %v; want %q", tc.configured, tc.listen, got, err, tc.want)
		}
	}
	for _, bad := range []string{"ftp://x", "http://u:p@x:1", "http://x:1/?q=1"} {
		if _, err := downloadBaseURL(bad, ":8089", bound); err == nil || !strings.Contains(err.Error(), "CUBE_MASTER_DOWNLOAD_BASE_URL") {
			t.Errorf("downloadBaseURL(%q) err = %v, want one naming the variable", bad, err)
		}
	}
}

// TestCheckFailsClosedWithoutPublicCredentials: serve refuses to start
// with public API authentication on (the default) and no credential, naming
// the settings; a bearer token, a signing key or an explicit off lets it.
func TestCheckFailsClosedWithoutPublicCredentials(t *testing.T) {
	cfg := config.Defaults()
	cfg.CallbackToken = "callback-token-0123456789abcdef"
	err := Check(cfg)
	if err == nil || !errors.Is(err, auth.ErrNoCredentials) {
		t.Fatalf("Check = %v, want ErrNoCredentials", err)
	}
	for _, name := range []string{"CUBE_MASTER_AUTH=false", "CUBE_MASTER_AUTH_BEARER_TOKENS", "CUBE_MASTER_AUTH_SECRET_KEYS"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("the refusal does not name %s: %v", name, err)
		}
	}
	ok := []func(*config.Config){
		func(c *config.Config) { c.Master.Auth.BearerTokens = []string{"bearer-token-0123456789"} },
		func(c *config.Config) { c.Master.Auth.SecretKeys = config.UserSecrets{"alice": "key"} },
		func(c *config.Config) { c.Master.Auth.Enabled = false },
	}
	for i, f := range ok {
		c := cfg
		f(&c)
		if err := Check(c); err != nil {
			t.Errorf("case %d: %v", i, err)
		}
	}
}
