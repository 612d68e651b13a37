// Package data is the data plane's core: what a template center does with
// the builds the control plane forwards and the artifacts it owns.
//
//   - The build executor (executor.go, run.go, artifact.go) accepts builds
//     (POST /tc/api/v1/build), runs each on the build pipeline
//     (core/pipeline) under a per-fingerprint lock, owns the artifact row of
//     what it builds, and tells the control plane about the job only through
//     the status reporter (the control plane owns job rows). Several
//     replicas may share one database and one bucket: the fingerprint lock
//     keeps two replicas from building the same spec, and the artifact
//     table's unique keys make the loser reuse the winner's READY row.
//   - The reconciler (reconciler.go) keeps data-plane state from wedging: it
//     fails jobs whose build stopped reporting (a restart abandons in-memory
//     builds, and invariant I1 would otherwise block the template for good),
//     hands long-stuck CLEANUP_PENDING artifacts to the deleter, and removes
//     scratch directories of dead builds (scratch.go).
//   - The deleter (deleter.go) is the data plane's half of artifact
//     deletion: only it removes an artifact's bytes and row.
package data
