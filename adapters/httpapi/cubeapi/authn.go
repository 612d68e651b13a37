package cubeapi

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/cubeview"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/envelope"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
)

// authenticate guards the public routes (and the proxied compat route)
// when Config.PublicAuth is set: a request that does not pass is answered
// HTTP 200 with ret_code 130401, as upstream's middleware answers it, and
// never reaches the handler. The refusal is logged with its reason, never
// with a credential.
func (s *server) authenticate(next http.Handler) http.Handler {
	if s.cfg.PublicAuth == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		caller, err := s.cfg.PublicAuth.Check(r)
		if err != nil {
			s.log.WarnContext(r.Context(), "public API request refused", "method", r.Method, "path", r.URL.Path,
				"remote", r.RemoteAddr, "user_id", truncate(r.Header.Get(auth.HeaderUserID), 64), "err", err)
			// The handler never reads the body of a refused request.
			wire.CloseAfterRefusal(w, r)
			s.fail(w, r, "", err)
			return
		}
		next.ServeHTTP(w, r.WithContext(auth.WithCaller(r.Context(), caller)))
	})
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// reveal reports whether r may see credentials in answers (the artifact
// download token in stored and generated requests): only a caller that
// authenticated on the public API, or that carries the shared callback
// token (a node or the data plane). With public authentication off (dev
// mode) only the latter.
func (s *server) reveal(r *http.Request) bool {
	if _, ok := auth.CallerFrom(r.Context()); ok {
		return true
	}
	return s.tokenOK(r)
}

// write answers v (a struct embedding envelope.Response) with HTTP 200,
// its credentials redacted unless the caller may see them.
func (s *server) write(w http.ResponseWriter, r *http.Request, v any) {
	if s.reveal(r) {
		envelope.Write(w, v)
		return
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	if err := enc.Encode(v); err != nil {
		s.fail(w, r, "", err)
		return
	}
	out, _ := cubeview.Redact(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(out, '\n'))
}
