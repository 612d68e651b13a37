// Package metrics defines the Prometheus collectors both apps expose on
// /metrics (SPEC §5): build phase durations, layer cache lookups, bytes
// pulled, active builds, status callbacks by result, and HTTP requests by
// route and code. New registers them on a registry the app passes in (never
// the global one, so tests and embedders can run several side by side).
//
// Every method is safe on a nil *Metrics and does nothing, so code paths can
// take an optional *Metrics without checks.
package metrics
