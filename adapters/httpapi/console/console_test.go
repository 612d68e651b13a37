package console

import (
	"io/fs"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	h := Handler()
	tests := []struct {
		method, target string
		wantCode       int
		wantType       string // a prefix of Content-Type
		wantLocation   string
	}{
		{"GET", "/console/", 200, "text/html", ""},
		{"HEAD", "/console/", 200, "text/html", ""},
		{"GET", "/console/app.js", 200, "text/javascript", ""},
		{"GET", "/console/api.js", 200, "text/javascript", ""},
		{"GET", "/console/builds.js", 200, "text/javascript", ""},
		{"GET", "/console/nodes.js", 200, "text/javascript", ""},
		{"GET", "/console/common.js", 200, "text/javascript", ""},
		{"GET", "/console/style.css", 200, "text/css", ""},
		{"GET", "/console/favicon.svg", 200, "image/svg+xml", ""},
		{"GET", "/console", 301, "", "/console/"},
		{"GET", "/console/nope.js", 404, "", ""},
		{"POST", "/console/", 405, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.target, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.target, nil))
			if rec.Code != tt.wantCode {
				t.Fatalf("HTTP %d, want %d", rec.Code, tt.wantCode)
			}
			hdr := rec.Header()
			for k, want := range map[string]string{
				"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
			} {
				if got := hdr.Get(k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
			if !strings.HasPrefix(hdr.Get("Content-Type"), tt.wantType) {
				t.Errorf("Content-Type %q, want %q", hdr.Get("Content-Type"), tt.wantType)
			}
			if got := hdr.Get("Location"); got != tt.wantLocation {
				t.Errorf("Location %q, want %q", got, tt.wantLocation)
			}
		})
	}
}

func TestCSPIsStrict(t *testing.T) {
	for _, want := range []string{"default-src 'self'", "frame-ancestors 'none'", "object-src 'none'"} {
		if !strings.Contains(CSP, want) {
			t.Errorf("CSP %q lacks %q", CSP, want)
		}
	}
	for _, loose := range []string{"unsafe-inline", "unsafe-eval", "*", "data:", "http:", "https:"} {
		if strings.Contains(CSP, loose) {
			t.Errorf("CSP %q allows %q", CSP, loose)
		}
	}
}

// TestFilesStaySafe holds the files to the rules the CSP and the XSS
// stance rely on: nothing fetched from another origin, no inline script
// or style, and no HTML parsing of strings in the scripts.
func TestFilesStaySafe(t *testing.T) {
	external := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//|@import|url\(\s*["']?(https?:)?//`)
	banned := []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "<script>", "style=", "onclick=", "onload=", "document.cookie"}
	n := 0
	err := fs.WalkDir(Files(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		b, err := fs.ReadFile(Files(), path)
		if err != nil {
			return err
		}
		s := string(b)
		if m := external.FindString(s); m != "" {
			t.Errorf("%s loads from another origin: %q", path, m)
		}
		for _, bad := range banned {
			if strings.Contains(s, bad) {
				t.Errorf("%s contains %q", path, bad)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 5 {
		t.Fatalf("only %d embedded files", n)
	}
}
