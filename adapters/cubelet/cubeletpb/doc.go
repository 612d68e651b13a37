// Package cubeletpb holds the Go code generated from this project's own
// .proto files for the Cubelet gRPC services (cubelet.services.images.v1
// Images, cubelet.services.cubebox.v1 CubeboxMgr, and the
// cubelet.services.errorcode.v1 Ret envelope).
//
// The .proto files are written for this project. They are wire-compatible
// with the upstream Cubelet: proto package, service, method and message
// names and every declared field number and type match upstream, so the
// control plane can talk to a real Cubelet and a real control plane can talk
// to apps/nodeagent. wire_test.go pins the field numbers by hand-encoding
// messages with protowire. Regenerate with `go generate` (see generate.go).
package cubeletpb
