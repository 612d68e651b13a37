package ports

// Sealer seals small secrets (registry credentials) for storage. A sealed
// value is safe to store and to back up: without the key it reveals
// nothing but its length, and any change to it is detected.
type Sealer interface {
	// Seal returns plaintext encrypted and authenticated; sealing the same
	// plaintext twice gives different values. A Sealer without a key to
	// seal with (it only opens values sealed before) fails with an error
	// wrapping core.ErrUnsupported: the caller then keeps nothing.
	Seal(plaintext []byte) (string, error)
	// Open returns the plaintext of a value Seal returned. A value sealed
	// with another key, altered, truncated or not a sealed value at all is
	// refused with an error wrapping core.ErrInvalidArgument that does not
	// quote the value.
	Open(sealed string) ([]byte, error)
	// Current reports whether sealed was sealed with the key Seal uses
	// now. A value Open opens but that is not current (an older key, a
	// legacy form) should be sealed again; one Current accepts needs
	// nothing. It does not check the value's integrity (Open does).
	Current(sealed string) bool
}
