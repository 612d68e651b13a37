package core

import (
	"errors"
	"fmt"
)

// Sentinel errors. Adapters and services wrap them with %w and context; the
// HTTP edges map them to API codes (see adapters/httpapi/envelope). Callers test with
// errors.Is.
var (
	// ErrNotFound: the named job, template, artifact or alias does not exist.
	ErrNotFound = errors.New("not found")
	// ErrInvalidArgument: a request field is missing or malformed. Wrapped by
	// *FieldError, which names the field.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrTemplateIDRequired: an operation needs a template id and got none.
	ErrTemplateIDRequired = errors.New("template id is required")
	// ErrDuplicateTemplate: a template with this id already exists and is not
	// FAILED; rootfs template specs are immutable.
	ErrDuplicateTemplate = errors.New("template already exists")
	// ErrNoTemplateNodes: no healthy node matches the distribution scope.
	ErrNoTemplateNodes = errors.New("no healthy template nodes")
	// ErrTemplateNotReady: the template has no READY replica.
	ErrTemplateNotReady = errors.New("template is not ready")
	// ErrAttemptInProgress: another job is active for the template and the
	// request differs from it. Wrapped by *ActiveJobError.
	ErrAttemptInProgress = errors.New("template attempt in progress")
	// ErrConflict: a uniqueness rule was violated (alias taken, duplicate
	// key, concurrent modification that cannot be retried).
	ErrConflict = errors.New("conflict")
	// ErrInvalidTransition: a state change the state machine forbids.
	ErrInvalidTransition = errors.New("invalid state transition")
	// ErrStaleUpdate: a late or duplicate report that would move a job
	// backwards or out of a terminal state; callers treat it as harmless.
	ErrStaleUpdate = errors.New("stale update ignored")
	// ErrFenced: a write from a control-plane run of a job that another run
	// has taken over (its lock was lost); the writer stops.
	ErrFenced = errors.New("superseded by a later run of the job")
	// ErrTemplateInUse: sandboxes still reference the template.
	ErrTemplateInUse = errors.New("template in use")
	// ErrStoreNotInitialized: the metadata store is not attached.
	ErrStoreNotInitialized = errors.New("template store not initialized")
	// ErrLocked: a TryLock found the lock held by another session.
	ErrLocked = errors.New("lock held by another session")
	// ErrBusy: a capacity limit (for example concurrent builds) is reached.
	ErrBusy = errors.New("busy")
	// ErrUnsupported: the adapter cannot do what was asked.
	ErrUnsupported = errors.New("unsupported")
	// ErrUnauthenticated: the caller sent no credential, or one that does
	// not verify (public API authentication).
	ErrUnauthenticated = errors.New("authentication failed")
)

// FieldError reports bad input and names the offending field.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return fmt.Sprintf("invalid %s: %s", e.Field, e.Reason) }

// Unwrap makes errors.Is(err, ErrInvalidArgument) true.
func (e *FieldError) Unwrap() error { return ErrInvalidArgument }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// ActiveJobError reports that a different request is already active for the
// template; it names the active job so the caller can poll it.
type ActiveJobError struct {
	TemplateID string
	JobID      string
	Status     JobStatus
}

func (e *ActiveJobError) Error() string {
	return fmt.Sprintf("template %s is currently %s (job_id=%s)", e.TemplateID, e.Status, e.JobID)
}

// Unwrap makes errors.Is(err, ErrAttemptInProgress) true.
func (e *ActiveJobError) Unwrap() error { return ErrAttemptInProgress }

// TransitionError names the refused transition.
type TransitionError struct {
	JobID    string
	From, To JobStatus
	Reason   string
}

func (e *TransitionError) Error() string {
	msg := fmt.Sprintf("job %s: %s -> %s", e.JobID, e.From, e.To)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// Unwrap makes errors.Is(err, ErrInvalidTransition) true.
func (e *TransitionError) Unwrap() error { return ErrInvalidTransition }
