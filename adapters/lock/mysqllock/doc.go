// Package mysqllock implements ports.Locker with MySQL/MariaDB user-level
// locks (GET_LOCK / RELEASE_LOCK). Such a lock belongs to a server session,
// so every held lock pins its own connection from the pool until Unlock;
// size the pool (SetMaxOpenConns) with that in mind. Of one process's callers
// waiting for a name only the first asks the server, waiting there while
// the pool can spare the connection and polling otherwise
// (adapters/lock/internal/waitq), so waiters queued on one name never take
// the pool from callers of other names.
//
// Every lock name is hashed to its server key by NormalizeName (the hex
// sha256 of the name, exactly the 64-character limit), which keeps
// distinct names distinct even on servers that compare lock names
// case-insensitively.
package mysqllock
