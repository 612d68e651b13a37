package registry

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// blobHint rides in the request context of one blob download. regclient
// has no API to start a blob GET at an offset and insists on a 200 with the
// whole blob, so the transport does the resume underneath it: it asks the
// registry for the missing suffix only and hands regclient the bytes
// already on disk followed by the suffix, which is the whole blob again.
// regclient's own size and digest checks, and ours, then run over the full
// content as usual.
type blobHint struct {
	digest string
	size   int64
	offset int64       // bytes already on disk; 0 = nothing to resume
	prefix io.ReaderAt // those bytes

	mu   sync.Mutex // guards the fields below
	seen bool       // the registry blob URL went through the transport
}

type hintKey struct{}

func withBlobHint(ctx context.Context, h *blobHint) context.Context {
	return context.WithValue(ctx, hintKey{}, h)
}

func hintFrom(ctx context.Context) *blobHint {
	h, _ := ctx.Value(hintKey{}).(*blobHint)
	return h
}

// resumeTransport implements blobHint handling around the egress-checked
// base transport.
type resumeTransport struct {
	base http.RoundTripper
}

func (t *resumeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Context().Done() == nil {
		return t.bounded(req)
	}
	h := hintFrom(req.Context())
	if h == nil || req.Method != http.MethodGet {
		return t.base.RoundTrip(req)
	}
	isBlob := strings.HasSuffix(req.URL.Path, "/blobs/"+h.digest)
	h.mu.Lock()
	if isBlob {
		h.seen = true
	}
	// Redirects from the blob URL (to a CDN) carry the same download.
	target := isBlob || (req.Response != nil && h.seen)
	h.mu.Unlock()
	if !target {
		return t.base.RoundTrip(req)
	}

	if rng := req.Header.Get("Range"); rng != "" {
		// regclient's own mid-stream resume asks for "bytes=N-<size>",
		// one past the last byte; strict servers answer 416. Fix the end.
		if fixed, ok := fixRangeEnd(rng, h.size); ok {
			req = req.Clone(req.Context())
			req.Header.Set("Range", fixed)
		}
		return t.base.RoundTrip(req)
	}
	if h.offset <= 0 || h.offset >= h.size {
		return t.base.RoundTrip(req)
	}

	rng := fmt.Sprintf("bytes=%d-%d", h.offset, h.size-1)
	r2 := req.Clone(req.Context())
	r2.Header.Set("Range", rng)
	resp, err := t.base.RoundTrip(r2)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusPartialContent {
		// 200: the server ignored Range and sends everything, which the
		// caller handles by skipping the prefix. Redirects and errors are
		// for regclient to handle.
		resp.Request = req
		return resp, nil
	}
	start, end, total, ok := parseContentRange(resp.Header.Get("Content-Range"))
	if !ok || start != h.offset || end != h.size-1 || (total >= 0 && total != h.size) {
		// A range we did not ask for: start over without Range; the
		// caller skips the prefix of the full body.
		resp.Body.Close()
		return t.base.RoundTrip(req)
	}
	body := resp.Body
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(io.NewSectionReader(h.prefix, 0, h.offset), body), body}
	resp.StatusCode = http.StatusOK
	resp.Status = "200 OK"
	resp.ContentLength = h.size
	resp.Header = resp.Header.Clone()
	resp.Header.Set("Content-Length", strconv.FormatInt(h.size, 10))
	resp.Header.Del("Content-Range")
	resp.Request = req
	return resp, nil
}

// fixRangeEnd turns "bytes=a-size" into "bytes=a-(size-1)".
func fixRangeEnd(rng string, size int64) (string, bool) {
	spec, ok := strings.CutPrefix(rng, "bytes=")
	if !ok {
		return "", false
	}
	a, b, ok := strings.Cut(spec, "-")
	if !ok {
		return "", false
	}
	end, err := strconv.ParseInt(b, 10, 64)
	if err != nil || end != size {
		return "", false
	}
	return "bytes=" + a + "-" + strconv.FormatInt(size-1, 10), true
}

// parseContentRange parses "bytes a-b/total" (total may be "*": -1).
func parseContentRange(s string) (start, end, total int64, ok bool) {
	spec, found := strings.CutPrefix(strings.TrimSpace(s), "bytes ")
	if !found {
		return 0, 0, 0, false
	}
	rng, tot, found := strings.Cut(spec, "/")
	if !found {
		return 0, 0, 0, false
	}
	a, b, found := strings.Cut(rng, "-")
	if !found {
		return 0, 0, 0, false
	}
	var err error
	if start, err = strconv.ParseInt(a, 10, 64); err != nil {
		return 0, 0, 0, false
	}
	if end, err = strconv.ParseInt(b, 10, 64); err != nil {
		return 0, 0, 0, false
	}
	total = -1
	if tot != "*" {
		if total, err = strconv.ParseInt(tot, 10, 64); err != nil {
			return 0, 0, 0, false
		}
	}
	return start, end, total, true
}

// A request whose context can never end is one of regclient's bearer-token
// fetches (it makes them without a context, and holds the credential's
// lock meanwhile): a token endpoint that trickles bytes forever would hold
// the build, and every build sharing those credentials, for good. Such a
// request gets contextlessTimeout for the whole exchange and at most
// contextlessMaxBody bytes of answer.
var contextlessTimeout = time.Minute

const contextlessMaxBody = 1 << 20

func (t *resumeTransport) bounded(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(req.Context(), contextlessTimeout)
	resp, err := t.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &boundedBody{body: resp.Body, left: contextlessMaxBody, cancel: cancel}
	return resp, nil
}

// boundedBody fails a read past its limit; closing it ends its request.
type boundedBody struct {
	body   io.ReadCloser
	left   int64
	cancel context.CancelFunc
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, fmt.Errorf("answer to a token request longer than %d bytes", contextlessMaxBody)
	}
	n, err := b.body.Read(p[:min(int64(len(p)), b.left)])
	b.left -= int64(n)
	return n, err
}

func (b *boundedBody) Close() error {
	err := b.body.Close()
	b.cancel()
	return err
}
