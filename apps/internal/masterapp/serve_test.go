package masterapp

import (
	"net"
	"strings"
	"testing"
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
