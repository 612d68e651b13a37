// Package progresstest is the conformance suite every ports.ProgressSink
// adapter runs: Get of an unknown job, a full round trip (zero values too),
// the latest publish winning, jobs kept apart, idempotent Delete, job ids
// with unusual characters, concurrent publishers, replicas that share one
// backend, and a cancelled context.
//
// Adapters run it through a Harness (the gocloud drivertest shape): each
// subtest gets a fresh Harness, and every sink a Harness makes stands for
// another replica on the same backend.
package progresstest
