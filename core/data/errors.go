package data

import (
	"context"
	"errors"
	"fmt"
	"time"

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

// errBuildTimeout is the cause of a build context that reached
// ExecutorConfig.BuildTimeout.
var errBuildTimeout = errors.New("build timeout")

// ErrLockLost fails a build whose fingerprint lock was lost mid-build:
// another replica may hold the lock and have claimed the row, so this build
// stops writing the artifact's bytes and never records them READY
// (ports.Lock.Lost). It still moves the row to FAILED while the row carries
// its own claim (build_owner_token), that is, while no newer build claimed
// it.
var ErrLockLost = errors.New("fingerprint lock lost during the build")

// BuildTimeoutError fails a build that ran longer than
// ExecutorConfig.BuildTimeout; Err is what the build was doing when it was
// stopped. It matches context.DeadlineExceeded.
type BuildTimeoutError struct {
	Limit time.Duration
	Err   error
}

func (e *BuildTimeoutError) Error() string {
	return fmt.Sprintf("build stopped after %s, the CUBE_TEMPLATE_CENTER_BUILD_TIMEOUT limit (raise it for registries this slow): %v", e.Limit, e.Err)
}

func (e *BuildTimeoutError) Unwrap() []error { return []error{context.DeadlineExceeded, e.Err} }

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
