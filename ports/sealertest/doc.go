// Package sealertest is the conformance suite of ports.Sealer: round trips,
// fresh values for the same plaintext, and refusal of altered, truncated,
// foreign and garbage values without quoting them.
package sealertest
