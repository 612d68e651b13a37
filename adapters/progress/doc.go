// Package progress groups the ports.ProgressSink adapters: memprogress keeps
// live job progress in process (embedded mode), redisprogress keeps it in
// Redis so any replica of either app can serve it.
package progress
