// Package lockertest is the conformance suite every ports.Locker adapter
// runs: mutual exclusion (within one Locker and across Lockers that model
// separate processes), release and re-acquire, blocking Lock, context
// cancellation, independent names, idempotent Unlock, heavy contention,
// names longer than database limits, and names compared byte for byte
// (case, accents, trailing spaces and Unicode normalisation never merge two
// names into one lock).
package lockertest
