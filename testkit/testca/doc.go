// Package testca makes CubeEgress root CA certificates for tests: real
// self-signed X.509 certificates, the same bytes for the same seed on
// every run, so that fingerprints computed from them are stable.
package testca
