package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/cubesandbox/templatecenter/core"
)

// Errors for statuses that point at deployment problems rather than at the
// request.
var (
	// ErrUnauthorized: the peer rejected our token (401); the two services
	// disagree on CUBE_TEMPLATE_CALLBACK_TOKEN.
	ErrUnauthorized = errors.New("peer rejected the callback token; CUBE_TEMPLATE_CALLBACK_TOKEN differs between cubemaster and templatecenter")
	// ErrUnavailable: the peer cannot serve the route (503): no token
	// configured on its side, no executor, or its store is not attached.
	ErrUnavailable = errors.New("peer unavailable")
)

// StatusError is a non-2xx answer on an internal route.
type StatusError struct {
	Op         string // "submit build j-1", "report job j-1 status"
	StatusCode int
	Message    string // the peer's {"error"} text, or the start of its body
}

func (e *StatusError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.StatusCode)
	}
	return fmt.Sprintf("%s: HTTP %d: %s", e.Op, e.StatusCode, msg)
}

// Unwrap maps the status to the sentinel callers test with errors.Is.
func (e *StatusError) Unwrap() error {
	switch e.StatusCode {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		return core.ErrInvalidArgument
	case http.StatusUnauthorized, http.StatusForbidden:
		return ErrUnauthorized
	case http.StatusNotFound:
		return core.ErrNotFound
	case http.StatusConflict:
		return core.ErrConflict
	case http.StatusTooManyRequests:
		return core.ErrBusy
	case http.StatusServiceUnavailable:
		return ErrUnavailable
	}
	return nil
}

// Retryable reports whether the status is worth another try for an
// idempotent request: 429 and 5xx.
func (e *StatusError) Retryable() bool {
	return e.StatusCode == http.StatusTooManyRequests || e.StatusCode >= 500
}

// maxErrorBody bounds what is read from an error answer.
const maxErrorBody = 4 << 10

// ReadStatusError consumes a non-2xx response body into a *StatusError.
func ReadStatusError(op string, resp *http.Response) *StatusError {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var body ErrorBody
	msg := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &body) == nil && body.Error != "" {
		msg = body.Error
	}
	return &StatusError{Op: op, StatusCode: resp.StatusCode, Message: msg}
}

// Drain reads what is left of a body (so the connection can be reused) and
// closes it.
func Drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
}

// ParseBaseURL checks a peer address (CUBE_TEMPLATE_CENTER_ADDR,
// CUBE_MASTER_ADDR). A bare host:port gets http://; a path prefix is kept
// (without its trailing slash); query, fragment and user info are refused
// (user info would put credentials in logs).
func ParseBaseURL(field, raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return "", &core.FieldError{Field: field, Reason: "is required"}
	}
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "", &core.FieldError{Field: field, Reason: "is not a URL"}
	case u.Scheme != "http" && u.Scheme != "https":
		return "", &core.FieldError{Field: field, Reason: fmt.Sprintf("scheme %q is not http or https", u.Scheme)}
	case u.Host == "":
		return "", &core.FieldError{Field: field, Reason: "has no host"}
	case u.User != nil:
		return "", &core.FieldError{Field: field, Reason: "must not carry user info"}
	case u.RawQuery != "" || u.Fragment != "":
		return "", &core.FieldError{Field: field, Reason: "must not have a query or fragment"}
	}
	return strings.TrimRight(u.String(), "/"), nil
}
