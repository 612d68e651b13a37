// Package mysqllock implements ports.Locker with MySQL/MariaDB user-level
// locks (GET_LOCK / RELEASE_LOCK). Such a lock belongs to a server session,
// so every held lock pins its own connection from the pool until Unlock;
// size the pool (SetMaxOpenConns) with that in mind.
package mysqllock
