package nodeagenttest

import (
	"encoding/json"

	"github.com/cubesandbox/templatecenter/core"
)

// CreateRequestJSON returns a sandbox create request shaped like the one
// the control plane generates for a rootfs template (upstream
// CreateCubeSandboxReq JSON): the app-snapshot annotations, the writable
// layer volume mounted at "/", and one container running the ext4 artifact.
func CreateRequestJSON(templateID, artifactID, instanceType string) []byte {
	req := map[string]any{
		"requestID": "req-" + templateID,
		"annotations": map[string]string{
			core.AnnotationTemplateID:         templateID,
			core.AnnotationAppSnapshotCreate:  "true",
			core.AnnotationAppSnapshotVersion: "v2",
			core.AnnotationTemplateVersion:    "v2",
			core.AnnotationArtifactID:         artifactID,
			core.AnnotationWritableLayerSize:  "1Gi",
			core.AnnotationSpecFingerprint:    "fp-" + templateID,
			core.AnnotationSystemDiskSize:     "1",
			core.AnnotationExposedPorts:       "8080:32000",
		},
		"volumes": []any{map[string]any{
			"name":          "cube_rootfs_rw",
			"volume_source": map[string]any{"empty_dir": map[string]any{"size_limit": "1Gi"}},
		}},
		"containers": []any{map[string]any{
			"name": "cubebox-name-0",
			"image": map[string]any{
				"image":               artifactID,
				"storage_media":       "ext4",
				"writable_layer_size": "1Gi",
				"annotations": map[string]string{
					core.AnnotationArtifactID:        artifactID,
					core.AnnotationWritableLayerSize: "1Gi",
				},
			},
			"command":          []string{"/bin/sh"},
			"args":             []string{"-c", "sleep infinity"},
			"envs":             []any{map[string]string{"key": "PATH", "value": "/usr/bin:/bin"}},
			"working_dir":      "/",
			"volume_mounts":    []any{map[string]string{"name": "cube_rootfs_rw", "container_path": "/"}},
			"resources":        map[string]string{"cpu": "2000m", "mem": "2000Mi"},
			"security_context": map[string]bool{"privileged": true},
			"r_limit":          map[string]uint64{"no_file": 1000000},
		}},
		"instance_type": instanceType,
		"network_type":  "tap",
	}
	b, err := json.Marshal(req)
	if err != nil {
		panic(err)
	}
	return b
}

// SandboxRequest is CreateRequestJSON as the domain request AppSnapshot
// takes.
func SandboxRequest(templateID, artifactID, instanceType string) *core.SandboxRequest {
	r, _, err := core.ParseSandboxRequest(CreateRequestJSON(templateID, artifactID, instanceType))
	if err != nil {
		panic(err)
	}
	return r
}
