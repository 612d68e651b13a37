// Package cubeapi is cubemaster's HTTP surface, a chi router over small
// interfaces the app adapts the control-plane services to:
//
//   - POST /internal/template/jobs/{job_id}/status: the templatecenter's
//     status callback, behind the shared token (package auth), with real
//     HTTP statuses: 200 {"status":"ok"} for applied and for stale or
//     duplicate reports, 400 bad body, 404 unknown job, 409 refused
//     transition, 413 oversized body. It sits outside any middleware that
//     could answer 200.
//   - the public /cube/* template routes (create-from-image, redo, migrate,
//     delete, list/get, alias, build status, rootfs-artifact) with the
//     upstream envelope: HTTP 200 and a ret_code (package envelope).
//   - GET|POST /cube/template/compat and GET|HEAD
//     /cube/template/artifact/download, forwarded to the templatecenter with
//     httputil.ReverseProxy (its statuses and 302s pass through).
//   - GET /notify/health (no database dependency) and GET /metrics.
//
// Every template write is served here, never proxied (seed §2.3, §4);
// CubeMasterRoutes lists the routes and contract tests pin both lists.
package cubeapi
