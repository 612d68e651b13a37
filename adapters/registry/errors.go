package registry

import (
	"context"
	"errors"
	"fmt"
	"net"

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

// classify maps a regclient or transport error onto core sentinels so the
// HTTP edge can answer with the right code. what names the object.
func classify(err error, what string) error {
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
