package ports

import "time"

// Clock tells the time; tests substitute a fixed one.
type Clock interface {
	Now() time.Time
}

// IDs mints identifiers.
type IDs interface {
	// NewJobID returns a fresh UUIDv4 string.
	NewJobID() string
	// NewHex returns 32 random lowercase hex characters (template ids use
	// the first 24).
	NewHex() string
	// NewToken returns an unguessable download token.
	NewToken() string
}
