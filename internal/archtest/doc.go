// Package archtest holds the test that keeps the dependency rule: core may
// use only the standard library, ports and small pure type libraries.
package archtest
