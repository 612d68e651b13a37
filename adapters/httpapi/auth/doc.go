// Package auth guards the internal routes of both services (templatecenter's
// /tc/api/v1/* and cubemaster's /internal/*) with the shared callback token
// (seed §6.1): the header X-Cube-Template-Callback-Token must equal
// CUBE_TEMPLATE_CALLBACK_TOKEN.
//
// It fails closed. With no secret configured every request gets 503 unless
// the single-binary dev opt-in CUBE_TEMPLATE_CALLBACK_INSECURE_NO_TOKEN=true
// was given, and CheckConfig lets the apps refuse to start in that state.
// Tokens are compared as HMAC-SHA256 digests under a per-process random key,
// in constant time, so neither the content nor the length of the secret
// leaks through timing, and an empty token never matches anything. A
// refusal closes the connection rather than read a body nobody will use.
//
// SingleCredentials, in front of both routers, refuses a request that
// carries any credential header twice, before anything judges either copy.
//
// The public API's checks (bearer tokens, upstream's signed headers) are in
// public.go.
package auth
