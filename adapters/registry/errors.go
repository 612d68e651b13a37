package registry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/opencontainers/go-digest"

	"github.com/regclient/regclient/types/errs"

	"github.com/cubesandbox/templatecenter/adapters/layercache"
	"github.com/cubesandbox/templatecenter/core"
)

// Errors this package wraps (besides core's sentinels), for callers that
// want to tell failures apart. ErrEgressDenied is declared in egress.go.
var (
	// ErrUnauthorized: the registry refused the credentials (or, as
	// registries answer for private and missing repositories alike, the
	// repository does not exist). Also wraps core.ErrNotFound.
	ErrUnauthorized = errors.New("registry denied access")
	// ErrDigestMismatch: bytes from the registry do not match the digest or
	// size in the descriptor that named them.
	ErrDigestMismatch = errors.New("content does not match its descriptor")
	// ErrDiffIDMismatch: a layer's uncompressed digest differs from the
	// config's rootfs.diff_ids entry.
	ErrDiffIDMismatch = errors.New("layer diff_id mismatch")
	// ErrImageRejected: the image breaks a limit or a rule (too many or too
	// large layers, foreign URLs, unknown media types, malformed JSON).
	ErrImageRejected = errors.New("image rejected")
)

// sentinels are the errors a scrubbed error keeps matching.
var sentinels = []error{
	core.ErrInvalidArgument, core.ErrNotFound, core.ErrUnsupported,
	ErrEgressDenied, ErrUnauthorized, ErrDigestMismatch, ErrDiffIDMismatch, ErrImageRejected,
	context.Canceled, context.DeadlineExceeded,
}

func refErr(format string, args ...any) error {
	return &core.FieldError{Field: "source_image_ref", Reason: fmt.Sprintf(format, args...)}
}

func rejectf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrImageRejected, fmt.Sprintf(format, args...))
}

// layerName names a layer in errors: its place in the image and its
// digest, once (the wrappers below it must not repeat the digest).
func layerName(i, n int, d digest.Digest) string {
	return fmt.Sprintf("layer %d of %d (%s)", i+1, n, d)
}

// causeError is an error with a shorter message that still unwraps to
// the original, so sentinels and retry decisions see everything.
type causeError struct {
	msg string
	err error
}

func (e *causeError) Error() string { return e.msg }
func (e *causeError) Unwrap() error { return e.err }

// regclientBlobPrefix starts regclient's blob errors, which repeat the
// digest and the reference the caller already names.
const regclientBlobPrefix = "failed to get blob"

// shortCause keeps the cause of a blob download failure and drops what the
// caller already says: regclient's "failed to get blob, digest D, ref R"
// and net/http's `Get "URL"` (both repeat the digest). A registry that
// died is then "dial tcp host:port: connect: connection refused".
func shortCause(err error) error {
	var ue *url.Error
	switch {
	case errors.As(err, &ue):
		return &causeError{msg: ue.Err.Error(), err: err}
	case strings.HasPrefix(err.Error(), regclientBlobPrefix) && errors.Unwrap(err) != nil:
		return &causeError{msg: errors.Unwrap(err).Error(), err: err}
	}
	return err
}

// classify maps a regclient or transport error onto core sentinels so the
// HTTP edge can answer with the right code. what names the object; ""
// when the caller names it.
func classify(err error, what string) error {
	if err != nil && what == "" {
		// No name to add: wrap with the sentinel only, keeping err's words.
		return classifyUnnamed(err)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", what, err)
	case errors.Is(err, ErrEgressDenied):
		return fmt.Errorf("%s: %w (%w)", what, err, core.ErrInvalidArgument)
	case errors.Is(err, errs.ErrHTTPUnauthorized):
		return fmt.Errorf("%s: %w: repository does not exist or the credentials are wrong: %w", what, ErrUnauthorized, core.ErrNotFound)
	case errors.Is(err, errs.ErrNotFound):
		return fmt.Errorf("%s: %w", what, core.ErrNotFound)
	case errors.Is(err, errs.ErrDigestMismatch), errors.Is(err, errs.ErrSizeLimitExceeded),
		errors.Is(err, layercache.ErrDigestMismatch), errors.Is(err, layercache.ErrSizeMismatch):
		// Wrong bytes, or more bytes than the descriptor says. (A short
		// read is a transport failure and stays retryable.)
		return fmt.Errorf("%s: %w: %v", what, ErrDigestMismatch, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// classifyUnnamed is classify for an error whose object the caller names.
func classifyUnnamed(err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, ErrEgressDenied):
		return fmt.Errorf("%w (%w)", err, core.ErrInvalidArgument)
	case errors.Is(err, errs.ErrHTTPUnauthorized):
		return fmt.Errorf("%w: repository does not exist or the credentials are wrong: %w", ErrUnauthorized, core.ErrNotFound)
	case errors.Is(err, errs.ErrNotFound):
		return fmt.Errorf("not found in the registry: %w", core.ErrNotFound)
	case errors.Is(err, errs.ErrDigestMismatch), errors.Is(err, errs.ErrSizeLimitExceeded),
		errors.Is(err, layercache.ErrDigestMismatch), errors.Is(err, layercache.ErrSizeMismatch):
		return fmt.Errorf("%w: %v", ErrDigestMismatch, err)
	}
	return err
}

// retryable reports whether another attempt may succeed: network trouble,
// 5xx and 429 (after regclient's own retries), short reads. Refusals,
// missing content, bad credentials and bad content are final.
func retryable(err error) bool {
	var dns *net.DNSError
	switch {
	case errors.As(err, &dns) && dns.IsNotFound:
		// No such host: asking again will not make it exist.
		return false
	case err == nil,
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, ErrEgressDenied), errors.Is(err, ErrImageRejected),
		errors.Is(err, ErrDiffIDMismatch),
		errors.Is(err, errs.ErrHTTPUnauthorized), errors.Is(err, ErrUnauthorized),
		errors.Is(err, errs.ErrNotFound), errors.Is(err, core.ErrNotFound),
		errors.Is(err, core.ErrInvalidArgument):
		return false
	case errors.Is(err, ErrDigestMismatch), errors.Is(err, errs.ErrDigestMismatch),
		errors.Is(err, errs.ErrSizeLimitExceeded), errors.Is(err, layercache.ErrDigestMismatch):
		// Wrong bytes from the registry are not a hiccup.
		return false
	}
	return true
}
