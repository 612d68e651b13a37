// Package faults is the fault-injection suite: the whole system as real
// processes (internal/systemtest/faults/harness), with faults injected between them,
// each scenario asserting the invariants I1–I6 and that nothing is left
// behind. See docs/reliability.md.
package faults
