// Package mysqllock implements ports.Locker with MySQL/MariaDB user-level
// locks (GET_LOCK / RELEASE_LOCK). Such a lock belongs to a server session,
// so every held lock pins its own connection from the pool until Unlock;
// size the pool (SetMaxOpenConns) with that in mind. A caller waiting in
// Lock holds no connection: it polls with GET_LOCK(key, 0) and a growing
// pause (10 ms to 500 ms), so waiters queued on one name never take the
// pool from callers of other names. Waiters are not served in order.
//
// Every lock name is hashed to its server key by NormalizeName (the hex
// sha256 of the name, exactly the 64-character limit), which keeps
// distinct names distinct even on servers that compare lock names
// case-insensitively.
package mysqllock
