// Package memstore implements ports.Store in memory, for tests and for
// running the services without a database. It passes ports/storetest like
// the SQL store (entstore) and keeps that store's rules: the unique, nullable
// active key of invariant I1, unique job ids and (template id, attempt),
// unique aliases and artifact fingerprints, byte-for-byte keys, UTC
// microsecond timestamps with updated_at strictly increasing on every
// update (also when the clock stands still or goes back), the same
// reference counting and the same list orders.
//
// Values are copied in and out: nothing a caller holds aliases a stored
// row.
//
// Concurrency:
//   - reads never wait for writers or transactions; they see committed data;
//   - every Update (jobs, definitions, artifacts) is optimistic: it reads a
//     copy and the row's revision, runs fn with no lock held, then writes
//     only if the revision is unchanged, and otherwise reads again and calls
//     fn again (bounded). So fn may call the store, or the Repos of its
//     transaction, without deadlocking, and may run more than once;
//   - Tx runs fn on a private copy of the data and publishes it on success:
//     all or nothing, and invisible to others until then. Transactions run
//     one at a time and exclude other writes while fn runs (as SQLite does),
//     so fn never needs a retry and runs exactly once. A write or Tx on the
//     store itself (not the Repos given to fn) from inside fn, with fn's
//     ctx, would wait for the transaction forever; it fails at once instead.
//
// Beyond entstore, memstore checks statuses, phases and operations when a
// job is written (entstore stores them and refuses the row when it is read
// back); it does not enforce column lengths.
package memstore
