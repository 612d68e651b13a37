// Package mysqllock implements ports.Locker with MySQL/MariaDB user-level
// locks (GET_LOCK / RELEASE_LOCK). Such a lock belongs to a server session,
// so every held lock pins its own connection from the pool until Unlock;
// size the pool (SetMaxOpenConns) with that in mind.
//
// Lock names are mapped to server keys by NormalizeName, which keeps
// distinct names distinct within the 64-character limit even on servers
// that compare lock names case-insensitively.
package mysqllock
