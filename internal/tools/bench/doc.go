// Package bench is the project's benchmark harness (make bench, see
// README.md). It makes a realistic image from files on the machine
// (image.go), times this project's builders and the reference pipelines
// on it, interleaved over several rounds (pipelines.go, bench.go), then
// the services: artifact downloads, status polling and distribution to
// node agents (services.go), on loopback or each behind a shaped link
// (links.go); how a cold build grows from that image to a ~4 GiB one made
// with generated Rust-like layers (scale.go, synth.go); a rebuild sent to
// 8 shaped links with chunks on and off (linkchunks.go); what a node
// receives with chunks (chunks.go). report.go turns the runs into the
// tables of docs/benchmarks.md. cmd/cubebench is the command. Nothing here
// asserts a time: the unit tests check the arithmetic only.
package bench
