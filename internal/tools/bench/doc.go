// Package bench is the project's benchmark harness (make bench, see
// README.md). It makes a realistic image from files on the machine
// (image.go), times this project's builders and the reference pipelines
// on it, interleaved over several rounds (pipelines.go, bench.go), then
// the services: artifact downloads, status polling and distribution to
// node agents (services.go); report.go turns the runs into the tables of
// docs/benchmarks.md. cmd/cubebench is the command. Nothing here asserts a
// time: the unit tests check the arithmetic only.
package bench
