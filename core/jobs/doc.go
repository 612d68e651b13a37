// Package jobs holds the image-job services of the control plane: submitting
// a from-image build under invariant I1 with request idempotency, and
// applying status reports through the job state machine.
package jobs
