// Package tcapi is the templatecenter's HTTP surface, a chi router over small
// interfaces the app adapts the data-plane services to:
//
//   - /tc/api/v1/build, /artifact/delete, /artifact/upload: the internal API
//     cubemaster calls, behind the shared token (package auth), answering
//     with real HTTP statuses and {"error": "..."} bodies. They sit outside
//     any middleware that could answer 200.
//   - GET|HEAD /cube/template/artifact/download: artifact bytes for nodes,
//     with Range, HEAD and ETag for local stores and a 302 to a URL presigned
//     at request time for S3/GCS; real 403/404 on errors.
//   - GET|POST /cube/template/compat: the compat report (upstream envelope).
//   - GET /health, GET /metrics.
//
// The router registers nothing that writes template state (definitions,
// replicas, aliases, jobs) and nothing that talks to cubelets: those stay on
// cubemaster (seed §2.3, §4). TemplateCenterRoutes lists the routes and a
// contract test pins them.
package tcapi
