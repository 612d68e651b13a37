package data

import (
	"errors"
	"fmt"

	"github.com/cubesandbox/templatecenter/core"
)

// ErrNotPending says a job exists but is not PENDING, so the data plane
// must not build it (it is running elsewhere, built, or finished). It is
// reported as "not found" to the caller, as upstream does (HTTP 404), so
// *NotPendingError matches both ErrNotPending and core.ErrNotFound.
var ErrNotPending = errors.New("job is not pending")

// ErrShuttingDown is returned by Submit once Shutdown has begun. It wraps
// core.ErrBusy: the control plane should retry later (or elsewhere).
var ErrShuttingDown = fmt.Errorf("template center shutting down: %w", core.ErrBusy)

// NotPendingError names the job and the status it is in.
type NotPendingError struct {
	JobID  string
	Status core.JobStatus
}

func (e *NotPendingError) Error() string {
	return fmt.Sprintf("job %s is %s, only PENDING jobs are built", e.JobID, e.Status)
}

// Unwrap makes errors.Is true for ErrNotPending and core.ErrNotFound.
func (e *NotPendingError) Unwrap() []error { return []error{ErrNotPending, core.ErrNotFound} }
