// Package tcapp wires and runs the data plane (templatecenter): the build
// pipeline for the one-shot `templatecenter build`, and the long-running
// service behind `templatecenter serve` and `cubemaster dev`. Everything
// is wired with samber/do; Options can hand in parts another plane already
// opened (dev mode shares one database, locker and progress sink between
// the planes of one process).
package tcapp
