// Package nodeagenttest is the conformance suite every ports.NodeAgent
// runs: CreateImage downloads the artifact with its token and verifies it
// (wrong sha256, wrong size, HTTP 404 and a wrong token are errors that
// leave no file), is idempotent and safe to call concurrently, and
// without a download URL only checks that the node holds the artifact
// (core.ErrNotFound when it does not); DestroyImage removes the bytes and
// accepts a missing artifact;
// AppSnapshot needs the artifact on the node and the app-snapshot
// annotations and returns a SnapshotResult; CleanupTemplate removes the
// template and is idempotent.
//
// The suite serves artifacts from one httptest server on loopback, whose
// base URL it gives the harness (HarnessConfig): the node must reach
// 127.0.0.1 and, if it restricts where it downloads from, allow that URL.
package nodeagenttest
