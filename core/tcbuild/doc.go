// Package tcbuild is the data plane's build executor: it accepts builds the
// control plane forwards (POST /tc/api/v1/build), runs each on the build
// pipeline under a per-fingerprint lock, owns the artifact row of what it
// builds, and tells the control plane about the job only through the
// status reporter (the control plane owns job rows).
//
// Several template-center replicas may share one database and one bucket:
// the fingerprint lock keeps two replicas from building the same spec, and
// the artifact table's unique keys make the loser reuse the winner's READY
// row instead of building again.
package tcbuild
