// Package cubecasourcetest is the conformance suite every
// ports.CubeCASource runs: the installed certificate's bytes are returned;
// a CA rotated behind the source's back is read on the next call (no
// restart); a CA that was never installed or has been removed is an error
// wrapping core.ErrNotFound; an empty file, text that is not PEM, a PEM
// block of another type, two certificates and an oversized file are errors
// wrapping core.ErrInvalidArgument. An error never comes with bytes, so a
// caller cannot bake a stale or broken CA.
package cubecasourcetest
