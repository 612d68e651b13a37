// Package cubeview holds the JSON shapes of cubemaster's public template
// API (upstream's field names): the request bodies the routes take and the
// objects they answer with, and their construction from the control
// plane's domain types. The master's router (package cubeapi) writes them
// and cubemastercli reads them, so the two cannot drift apart.
//
// The upstream envelope ({"ret": ...}) is added by package envelope; the
// types here are what sits beside it.
package cubeview
