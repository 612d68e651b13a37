// Package liveness frees templates whose build was abandoned. A data-plane
// process holds an owner lock (a database session lock) for as long as it
// runs and writes its instance id into every job it accepts; a running
// build touches its job row every sixth of the liveness timeout. Any
// data-plane replica and the master then fail a build job whose owner lost
// its lock (the process exited: decided at once) or whose row went
// untouched for the timeout (the process hung), and redo, delete and
// create fail the abandoned job in their way instead of answering
// "conflict".
package liveness
