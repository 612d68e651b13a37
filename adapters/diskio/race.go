//go:build race

package diskio

// raceEnabled: built with -race. The race detector does not see accesses
// to mapped memory, so under it the pieces come from the Go heap, where a
// piece read or written after it was handed back is reported.
const raceEnabled = true
