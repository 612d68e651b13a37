// Package agent is the node side of template distribution. It serves the
// Cubelet gRPC services the control plane calls — Images.CreateImage and
// DestroyImage, CubeboxMgr.AppSnapshot and CleanupTemplate — with the
// Cubelet's wire format (adapters/cubelet/cubeletpb), so a control plane
// talks to it exactly as to a Cubelet.
//
// It does NOT boot VMs. AppSnapshot checks the request and that the rootfs
// artifacts are on the node and records a run template; a real Cubelet
// would create a sandbox, snapshot it and destroy it.
//
// Unlike a Cubelet it trusts no caller by address: the server NewServer
// builds refuses every call (gRPC health and unknown methods included)
// that does not carry the node credential, Config.Token, in the
// x-cube-node-token metadata (auth.go), and New refuses to run without
// one. It downloads only from URLs under Config.MasterURLs (origin.go),
// and writes its files with Config.FileMode, 0640 in 0750 directories by
// default (files.go).
//
// On disk, under the data dir:
//
//	<instanceType>/<aid>/<aid>.ext4          the artifact (verified)
//	<instanceType>/<aid>/<aid>.ext4.sha256   its verified digest
//	<instanceType>/<aid>/<aid>.ext4.download a download in progress
//	templates/<templateID>/template.json     a run template (TemplateRecord)
//
// CreateImage for storage_media "ext4" downloads the URL in the
// cube.master.rootfs.artifact.url annotation with the header
// X-Cube-Artifact-Token (the URL's own query, token included, is kept;
// the header is dropped on a redirect to another host, and no redirect
// carries a Referer, which would quote that query), accepts only HTTP
// 200 or 206, checks the annotated size and sha256 (hex in any case),
// fsyncs and renames into place; a mismatch is reported without the
// digest or size of what was downloaded. Without a URL it is a presence
// check: success when the node holds the artifact with the annotated size
// and sha256, else a failure saying it "does not exist", and nothing is
// fetched. It is idempotent and safe to call
// concurrently for one artifact. DestroyImage deletes the artifact's
// directory (upstream's Cubelet kept the ext4: a node-side leak). Failures
// are reported the Cubelet way, as a Ret with a non-200 ret_code and a
// message naming the node; tokens and URL queries are never logged.
package agent
