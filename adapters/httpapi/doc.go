// Package httpapi is the root of the HTTP edges of both services. It holds
// no code; the sub-packages are:
//
//   - auth: the shared-token middleware of the internal routes (fail closed).
//   - envelope: the upstream public envelope, its error codes and the JSON
//     body decoder shared by every route.
//   - wire: the JSON bodies exchanged between cubemaster and templatecenter
//     on the internal routes, and the status-callback codec.
//   - metrics: the Prometheus collectors both apps register.
//   - routes: the route table type the contract tests pin.
//   - tcapi: the templatecenter router (internal API, artifact download and
//     upload, compat, health, metrics).
//   - cubeapi: the cubemaster router (status callback, public /cube/* template
//     routes, proxies to templatecenter).
//   - tcclient: ports.DataPlane over HTTP (cubemaster -> templatecenter).
//   - masterclient: ports.StatusReporter over HTTP (templatecenter -> cubemaster).
//
// Every package talks to the services through small interfaces it declares
// itself; the apps adapt core services to them.
package httpapi
