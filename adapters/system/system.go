// Package system provides the production Clock and IDs: the wall clock and
// identifiers from crypto/rand.
package system

import (
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/google/uuid"

	"github.com/cubesandbox/templatecenter/ports"
)

// Clock is the wall clock.
type Clock struct{}

// Now returns the current time.
func (Clock) Now() time.Time { return time.Now() }

// IDs mints UUIDv4 job ids, random hex and download tokens.
type IDs struct{}

// NewJobID returns a UUIDv4.
func (IDs) NewJobID() string { return uuid.NewString() }

// NewHex returns 32 random lowercase hex characters.
func (IDs) NewHex() string { return randomHex(16) }

// NewToken returns a 256-bit random token as hex.
func (IDs) NewToken() string { return randomHex(32) }

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand failed: " + err.Error()) // the kernel RNG does not fail on Linux
	}
	return hex.EncodeToString(b)
}

var (
	_ ports.Clock = Clock{}
	_ ports.IDs   = IDs{}
)
