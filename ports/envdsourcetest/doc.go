// Package envdsourcetest is the conformance suite every ports.EnvdSource
// runs: the installed binary's exact bytes are returned; a binary replaced
// behind the source's back is read again on the next call (no restart); an
// empty binary is an error wrapping core.ErrInvalidArgument; a binary that
// was never installed or has been removed is an error wrapping
// core.ErrNotFound. An error never comes with bytes, so a caller cannot
// inject a stale or partial binary.
package envdsourcetest
