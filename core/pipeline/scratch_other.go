//go:build !unix

package pipeline

// lockScratch does nothing where flock is missing.
func lockScratch(string) (func(), error) { return func() {}, nil }

// ScratchHeld cannot tell here: known is always false.
func ScratchHeld(string) (held, known bool, err error) { return false, false, nil }
