// Package joblogtest is the conformance suite every ports.JobLog adapter
// runs: an unknown job has no lines, a round trip keeps every field and
// the order, jobs are kept apart, the newest lines win a limit, a job keeps
// at most ports.MaxJobLogLines lines, long messages are cut on a character
// boundary, a line without a job is refused whole, DeleteBefore removes
// old lines only, and two logs on one backend (two replicas) read each
// other's lines.
//
// Adapters run it through a Harness (the gocloud drivertest shape): each
// subtest gets a fresh Harness, and every log a Harness makes stands for
// another replica on the same backend.
package joblogtest
