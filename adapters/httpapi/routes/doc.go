// Package routes describes the method+path pairs a router registers, so
// contract tests can pin exactly which routes each app serves and how
// (locally, proxied, internal). The route tables themselves live in tcapi
// and cubeapi next to the handlers; Walk reads back what a chi router really
// registered.
package routes
