// Package statusreportertest is the conformance suite every
// ports.StatusReporter runs, against a control plane the harness serves
// and scripts.
//
//   - Reports arrive for the right job with every delivered field: status,
//     phase, progress, error message (absent, cleared or set), pull
//     progress, the artifact ids of the update, and the artifact metadata
//     of a BUILT report.
//   - The reporter's token is what the control plane accepts; a reporter
//     with a wrong one is refused after one attempt and delivers nothing.
//   - Failures retrying may fix (the control plane failing) are retried
//     until the report is delivered once; a failure that persists ends in
//     an error after a bounded number of attempts.
//   - Refusals (unknown job, a transition the state machine refuses, a
//     malformed report) are returned after at most one attempt; an unknown
//     job wraps core.ErrNotFound. A bad job id is refused with
//     core.ErrInvalidArgument before anything is sent. A stale report the
//     control plane acknowledges is success.
//   - Cancellation is honoured before sending, while the control plane
//     holds a report, and after a failed attempt: Report returns an error
//     wrapping context.Canceled and the report is not delivered.
//
// No error contains a token.
package statusreportertest
