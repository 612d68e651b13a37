package main

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core/control"
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

func TestSummaryKeepsCreatedAt(t *testing.T) {
	s := summary(&control.TemplateInfo{TemplateID: "t", Status: "READY", CreatedAt: "2026-01-02T03:04:05Z", ImageInfo: "r@sha256:x"})
	if !s.CreatedAt.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) || s.ImageInfo != "r@sha256:x" || s.Status != "READY" {
		t.Fatalf("summary = %+v", s)
	}
	if s := summary(&control.TemplateInfo{TemplateID: "t"}); !s.CreatedAt.IsZero() {
		t.Fatalf("empty created_at gave %v", s.CreatedAt)
	}
}
