package console

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

// Path is where the console is mounted; "/console" redirects to it.
const Path = "/console/"

// CSP is the Content-Security-Policy of every console answer: everything
// from this origin only, no plugins, no framing, no <base> rewriting, and
// forms post nowhere (the page acts through fetch).
const CSP = "default-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

//go:embed static
var static embed.FS

// Files are the console's files (index.html, app.js, ...), for tests.
func Files() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree always has static/
	}
	return sub
}

// Handler serves the console under Path (and redirects the bare
// "/console" to it). It answers GET and HEAD only.
func Handler() http.Handler {
	files := http.StripPrefix(strings.TrimSuffix(Path, "/"), http.FileServerFS(Files()))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		// A new binary's files show on the next load.
		h.Set("Cache-Control", "no-cache")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if r.URL.Path == strings.TrimSuffix(Path, "/") {
			http.Redirect(w, r, Path, http.StatusMovedPermanently)
			return
		}
		files.ServeHTTP(w, r)
	})
}
