// Package harness runs CubeTemplateCenter as real processes on loopback for
// the fault, load and soak suites (internal/systemtest/faults, internal/systemtest/load,
// internal/systemtest/soak): cubemaster, templatecenter and nodeagent binaries built
// from ./apps, private MariaDB and Redis servers the suites may kill and
// restart, and fault-injecting proxies in front of the registry, the S3
// server, the status callbacks and the nodes. It also checks the system's
// invariants (I1–I6 of the reliability reference) and that nothing is left
// behind: rows, objects, node files, scratch directories and processes.
//
// Everything here is test support; it is imported only by tests.
package harness
