// Package templates holds the control plane's template services: create
// from image (forwarded to the data plane), the status callback, the resume
// pipeline that registers a built artifact, distributes it to nodes and
// snapshots the template there, redo, reference-counted three-phase
// deletion, orphan GC, the BUILT-job sweeper, alias and template reads.
//
// Everything goes through ports: the metadata store, a cross-process
// Locker, the node directory and node agent (Cubelet), and the data plane's
// BuildDispatcher. The package never talks to a database, a node or the data
// plane directly, so it runs the same in the embedded single-binary mode and
// against MySQL/PostgreSQL with several control-plane replicas.
//
// Design references: seed 001 §3 (jobs, alias, redo, resume), §9 (locks,
// GC, three-phase artifact deletion, placements) and the upstream facts in
// reference/upstream-cubesandbox.md §3.6, §4, §5, §9.
package templates
