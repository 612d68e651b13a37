// Package lock groups the ports.Locker adapters: mysqllock (MySQL/MariaDB
// GET_LOCK on a pinned connection), pglock (PostgreSQL session advisory
// locks on a pinned connection) and memlock (in-process, for the embedded
// SQLite mode). All three pass the suite in ports/lockertest.
package lock
