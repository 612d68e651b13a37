// Package reconcile keeps the data plane's state from wedging: the
// reconciler fails jobs whose build stopped reporting (a template-center
// restart abandons in-memory builds, and invariant I1 would otherwise block
// the template for good), hands long-stuck CLEANUP_PENDING artifacts to the
// deleter, and removes scratch directories of dead builds. The Deleter is
// the data plane's half of artifact deletion: only it removes an
// artifact's bytes and row.
package reconcile
