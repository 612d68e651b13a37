// Package masterapp wires and runs the control plane (cubemaster serve,
// and the master half of cubemaster dev) with samber/do. Options can hand
// in a store, locker and progress sink another plane of the same process
// already opened, so dev mode runs both planes on one database and one
// in-memory progress sink.
package masterapp
