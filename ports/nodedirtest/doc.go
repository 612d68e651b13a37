// Package nodedirtest is the conformance suite every ports.NodeDirectory
// adapter runs: HealthyNodes filters by instance type and health (serving,
// not serving, unreachable) and returns complete nodes without duplicates;
// a node that goes down leaves HealthyNodes and comes back when it
// recovers, a node that was down at start joins once it is up; Get finds
// every listed node whatever its health and wraps core.ErrNotFound for
// unknown ids; disabled nodes (an optional capability) leave both; results
// are copies; concurrent callers and a cancelled context are safe.
//
// Beyond the port's doc comments the suite pins what the control plane
// relies on: HealthyNodes("") means core.DefaultInstanceType, and Get
// returns unhealthy nodes (cleanup must reach a node as soon as it is back).
//
// The Harness runs the node agents, so the suite decides each node's
// health; a directory may notice changes at its own pace, and the suite
// waits (within the subtest's timeout) until it has.
package nodedirtest
