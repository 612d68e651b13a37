// Command demo is what `make demo` runs: it starts `cubemaster dev` on a
// fresh data directory, builds the example image into a template with
// `cubemastercli tpl create-from-image` (its live progress on this
// terminal), checks that the template is READY and that the artifact on
// the node has the sha256 the master recorded, prints a summary (template
// id, artifact id, sha256, size, time per phase), and stops dev cleanly.
// It needs only the binaries `make build` leaves in bin/ and works offline.
package main
