// Package soak repeats create / redo / delete cycles on a running system
// and checks that nothing grows: open files and goroutines of every
// process, scratch space, database rows, bucket objects, node files. See
// docs/reliability.md.
package soak
