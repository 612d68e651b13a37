package wire

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
)

// CloseAfterRefusal makes the server close the connection after the answer
// being written, instead of reading the rest of the request body to reuse
// it. A route that refuses a caller (bad credentials, no such route) never
// reads the body; net/http would otherwise read up to 256 KiB of it before
// sending the answer, for as long as the read timeout lets a slow client
// trickle it. Call it before the answer's WriteHeader.
func CloseAfterRefusal(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
	}
}

// NotFound answers a request no route serves like http.NotFound, closing
// a connection whose body nobody read.
func NotFound(w http.ResponseWriter, r *http.Request) {
	CloseAfterRefusal(w, r)
	http.NotFound(w, r)
}

// MethodNotAllowed answers a request whose path is served for other
// methods, as chi's default does (405 with Allow), closing a connection
// whose body nobody read.
func MethodNotAllowed(w http.ResponseWriter, r *http.Request) {
	if rc := chi.RouteContext(r.Context()); rc != nil && rc.Routes != nil {
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			if rc.Routes.Match(chi.NewRouteContext(), m, r.URL.Path) {
				w.Header().Add("Allow", m)
			}
		}
	}
	CloseAfterRefusal(w, r)
	w.WriteHeader(http.StatusMethodNotAllowed)
}

// ZeroSuffixRange handles what http.ServeContent gets wrong in a Range
// header: a suffix range of zero bytes ("bytes=-0") selects nothing, so a
// range set made only of such ranges is unsatisfiable (RFC 9110 §14.1.1),
// but net/http answers it 206 with an empty body. It drops zero-length
// suffix ranges from the header, and when none is left answers 416 with
// the representation's size and returns true (the caller is done). With
// If-Range, whose validator the caller has not judged yet, an all-zero
// set is dropped instead and the whole representation served, which RFC
// 9110 allows for any Range.
func ZeroSuffixRange(w http.ResponseWriter, r *http.Request, size int64) (answered bool) {
	spec, ok := strings.CutPrefix(strings.TrimSpace(r.Header.Get("Range")), "bytes=")
	if !ok {
		return false
	}
	var kept []string
	dropped := false
	for part := range strings.SplitSeq(spec, ",") {
		if isZeroSuffix(strings.TrimSpace(part)) {
			dropped = true
			continue
		}
		kept = append(kept, part)
	}
	switch {
	case !dropped:
		return false
	case len(kept) > 0:
		r.Header.Set("Range", "bytes="+strings.Join(kept, ","))
		return false
	case r.Header.Get("If-Range") != "":
		r.Header.Del("Range")
		return false
	}
	w.Header().Set("Content-Range", "bytes */"+strconv.FormatInt(size, 10))
	http.Error(w, "requested range not satisfiable: a suffix range of zero bytes selects nothing", http.StatusRequestedRangeNotSatisfiable)
	return true
}

// isZeroSuffix reports whether a byte range spec is "-0" (any number of
// zeros).
func isZeroSuffix(s string) bool {
	digits, ok := strings.CutPrefix(s, "-")
	return ok && digits != "" && strings.Trim(digits, "0") == ""
}
