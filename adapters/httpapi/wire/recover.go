package wire

import (
	"log/slog"
	"net/http"
	"runtime/debug"
)

// Recover turns a handler panic into a logged 500 {"error": "internal
// error"} (upstream answered panics with HTTP 200, which a status-code
// client reads as success). http.ErrAbortHandler is re-raised, as net/http
// expects.
func Recover(log *slog.Logger) func(http.Handler) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				v := recover()
				if v == nil {
					return
				}
				if v == http.ErrAbortHandler {
					panic(v)
				}
				log.ErrorContext(r.Context(), "handler panic", "method", r.Method, "path", r.URL.Path,
					"panic", v, "stack", string(debug.Stack()))
				WriteError(w, http.StatusInternalServerError, "internal error")
			}()
			next.ServeHTTP(w, r)
		})
	}
}
