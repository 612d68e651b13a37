// Package masterclient is ports.StatusReporter over HTTP: the templatecenter
// reports job status to cubemaster with
//
//	POST $CUBE_MASTER_ADDR/internal/template/jobs/{job_id}/status
//	X-Cube-Template-Callback-Token: <CUBE_TEMPLATE_CALLBACK_TOKEN>
//
// and the body of wire.StatusReport. Each attempt has a 10 s timeout;
// transport errors, 429 and 5xx are retried with a backoff of 500 ms
// doubling to at most 5 s, 6 attempts in all for progress reports and 12 for
// those that end the build (BUILT, FAILED, READY), which the master must
// not miss.
// Other 4xx answers are final. Retrying is safe: the master acknowledges a
// duplicate or late report without applying it.
package masterclient
