// Package load is the multi-replica load suite: two masters and two
// data-plane replicas on one MariaDB and one S3 bucket take concurrent
// create requests for a set of specs that share a base layer, at both
// masters, and then as many deletes. See docs/reliability.md.
package load
