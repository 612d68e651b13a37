package cubeletpb

// Annotation keys and values both sides of the Cubelet protocol agree on.
// They are wire facts like the field numbers, so they live with the protos.
const (
	// On ImageSpec.annotations for ext4 distribution (CreateImage).
	AnnotationArtifactID        = "cube.master.rootfs.artifact.id"
	AnnotationArtifactURL       = "cube.master.rootfs.artifact.url"
	AnnotationArtifactToken     = "cube.master.rootfs.artifact.token"
	AnnotationArtifactSHA256    = "cube.master.rootfs.artifact.sha256"
	AnnotationArtifactSizeBytes = "cube.master.rootfs.artifact.size_bytes"
	AnnotationWritableLayerSize = "cube.master.rootfs.writable_layer_size"
	AnnotationSpecFingerprint   = "cube.master.template.spec_fingerprint"
	AnnotationInstanceType      = "cube.master.instance.type"

	// On RunCubeSandboxRequest.annotations for AppSnapshot.
	AnnotationAppSnapshotCreate     = "cube.master.appsnapshot.create"
	AnnotationAppSnapshotTemplateID = "cube.master.appsnapshot.template.id"

	// AnnotationExposedPorts lists ports as "p1:p2"; the control plane turns
	// it into RunCubeSandboxRequest.exposed_ports.
	AnnotationExposedPorts = "com.exposed_ports"

	// StorageMediaExt4 is ImageSpec.storage_media for a prebuilt ext4 rootfs.
	StorageMediaExt4 = "ext4"

	// HeaderArtifactToken carries the download token when a node fetches an
	// artifact.
	HeaderArtifactToken = "X-Cube-Artifact-Token"

	// DefaultInstanceType is used when a request names none.
	DefaultInstanceType = "cubebox"
)

// Succeeded reports whether a Ret means success: 200, or 0 from peers that
// leave the field unset.
func (r *Ret) Succeeded() bool {
	if r == nil {
		return true
	}
	return r.RetCode == ErrorCode_Success || r.RetCode == ErrorCode_OK
}
