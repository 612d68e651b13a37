package cubelet

import (
	"fmt"
	"strconv"

	"github.com/cubesandbox/templatecenter/adapters/cubelet/cubeletpb"
	"github.com/cubesandbox/templatecenter/core"
)

// ImageSpecOf is the CreateImage spec of an artifact: the artifact id as
// the image, storage media ext4, and everything a node needs to fetch and
// verify the bytes in the cube.master.* annotations.
func ImageSpecOf(a core.NodeArtifact) *cubeletpb.ImageSpec {
	ann := map[string]string{
		core.AnnotationArtifactID:        a.ArtifactID,
		core.AnnotationArtifactURL:       a.DownloadURL,
		core.AnnotationArtifactToken:     a.Token,
		core.AnnotationArtifactSHA256:    a.SHA256,
		core.AnnotationArtifactSizeBytes: strconv.FormatInt(a.SizeBytes, 10),
		core.AnnotationWritableLayerSize: a.WritableLayerSize,
		core.AnnotationSpecFingerprint:   a.Fingerprint,
	}
	if a.InstanceType != "" {
		ann[core.AnnotationInstanceType] = a.InstanceType
	}
	return &cubeletpb.ImageSpec{Image: a.ArtifactID, StorageMedia: core.StorageMediaExt4, Annotations: ann}
}

// ArtifactOf reads a CreateImage spec back into the artifact it names: the
// node side of ImageSpecOf. The annotation's artifact id must match the
// image (when both are set), and a size that is present must be a number;
// an absent size is -1.
func ArtifactOf(spec *cubeletpb.ImageSpec) (core.NodeArtifact, error) {
	ann := spec.GetAnnotations()
	a := core.NodeArtifact{
		ArtifactID:        ann[core.AnnotationArtifactID],
		DownloadURL:       ann[core.AnnotationArtifactURL],
		Token:             ann[core.AnnotationArtifactToken],
		SHA256:            ann[core.AnnotationArtifactSHA256],
		SizeBytes:         -1,
		WritableLayerSize: ann[core.AnnotationWritableLayerSize],
		Fingerprint:       ann[core.AnnotationSpecFingerprint],
		InstanceType:      ann[core.AnnotationInstanceType],
	}
	if a.ArtifactID == "" {
		a.ArtifactID = spec.GetImage()
	}
	if spec.GetImage() != "" && a.ArtifactID != spec.GetImage() {
		return a, &core.FieldError{Field: "spec.annotations." + core.AnnotationArtifactID,
			Reason: fmt.Sprintf("%q does not match image %q", a.ArtifactID, spec.GetImage())}
	}
	if v, ok := ann[core.AnnotationArtifactSizeBytes]; ok && v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return a, &core.FieldError{Field: "spec.annotations." + core.AnnotationArtifactSizeBytes, Reason: fmt.Sprintf("%q is not a byte count", v)}
		}
		a.SizeBytes = n
	}
	return a, nil
}
