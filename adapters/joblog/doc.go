// Package joblog records what the services log about a job: a
// Recorder's slog handler passes every record on to the process's own
// handler and, when the record (or its logger's attributes) names a job
// ("job" or "job_id") at INFO or above, queues a line for the shared
// ports.JobLog. A goroutine writes the queue in batches, so logging never
// waits for the database; when the queue is full lines are dropped (and
// counted), never the process's own log.
package joblog
