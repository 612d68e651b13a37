// Package cubelet is the control plane's client for node agents: it
// implements ports.NodeAgent over the Cubelet gRPC protocol
// (cubelet.services.images.v1.Images and cubelet.services.cubebox.v1
// CubeboxMgr, protos in cubeletpb), so the same client talks to a real
// Cubelet or to apps/nodeagent.
//
// A Client keeps one connection per node address, bounds CreateImage and
// DestroyImage by a timeout (300 s by default, like upstream), and turns a
// Ret whose ret_code is neither 200 nor 0 into a *RetError naming the node
// and carrying ret_msg. "Not found" answers of DestroyImage and
// CleanupTemplate count as success, because both are idempotent cleanups.
// AppSnapshot takes the generated sandbox create request as JSON and maps
// it explicitly onto RunCubeSandboxRequest (see RunRequestFromJSON).
// Calls to many nodes at once are the control plane's (its one bounded
// fan-out, fanOut in core/control).
//
// NodeCredentials gives the dial options of every connection to a node
// (the client's and the node directory's health probes): the node
// credential as per-call metadata (x-cube-node-token, which node agents
// require and Cubelets ignore) and, with a CA, TLS or mutual TLS.
package cubelet
