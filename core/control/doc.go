// Package control is the control plane's core: everything cubemaster does
// with templates, their jobs and their replicas on nodes.
//
// Where each part lives:
//
//   - submit.go: the one job-creation function (invariant I1: one active job
//     per template and kind, decided by the store's unique active key), used
//     by create (create.go), redo (redo.go) and migrate (migrate.go);
//   - report.go: the data plane's status reports (the BUILT callback);
//   - resume.go: the resume pipeline after a build — register the artifact,
//     distribute it (distribute.go, targets from nodes.go), write the
//     definition (definition.go), snapshot on the nodes (snapshot.go),
//     finalize;
//   - delete.go: reference-counted three-phase template and artifact
//     deletion; gc.go: orphan collection;
//   - sweep.go: every control-plane sweep (BUILT replay, stale migrates, GC,
//     the replica check of replicacheck.go, convergence of converge.go) and
//     the loop that runs them;
//   - placement.go: the placement policy in force (the file's, or the one
//     the API kept in the store), where templates with no nodes named go
//     (create, redo, convergence), and the placement controller (one master
//     at a time under a watched named lock: pins kept at their minimum,
//     unpinned replicas evicted from nodes over their limits);
//   - query.go, alias.go: reads, resolution and aliases;
//   - request.go, create_template.go: the sandbox request generated for
//     nodes and the synchronous create from a sandbox request.
//
// Everything goes through ports: the metadata store, a cross-process
// Locker, the node directory and node agent, and the data plane. The package
// never talks to a database, a node or the data plane directly, so it runs
// the same embedded in one process and against MySQL/PostgreSQL with
// several control-plane replicas.
//
// Design references: seed 001 §3 (jobs, alias, redo, resume), §9 (locks,
// GC, three-phase artifact deletion, placements) and the upstream facts in
// reference/upstream-cubesandbox.md §3.6, §4, §5, §9.
package control
