package core

import (
	"fmt"
	"slices"
	"time"
)

// ArtifactStatus is the status of a rootfs artifact row.
type ArtifactStatus string

// Artifact statuses. CLEANUP_PENDING marks a row whose references are gone
// and whose node copies are being destroyed; DELETING is the data plane's
// claim while it removes the bytes.
const (
	ArtifactPending        ArtifactStatus = "PENDING"
	ArtifactBuilding       ArtifactStatus = "BUILDING"
	ArtifactReady          ArtifactStatus = "READY"
	ArtifactFailed         ArtifactStatus = "FAILED"
	ArtifactCleanupPending ArtifactStatus = "CLEANUP_PENDING"
	ArtifactDeleting       ArtifactStatus = "DELETING"
)

var artifactEdges = map[ArtifactStatus][]ArtifactStatus{
	ArtifactPending:        {ArtifactBuilding, ArtifactReady, ArtifactFailed, ArtifactCleanupPending},
	ArtifactBuilding:       {ArtifactReady, ArtifactFailed},
	ArtifactReady:          {ArtifactBuilding, ArtifactCleanupPending, ArtifactFailed},
	ArtifactFailed:         {ArtifactPending, ArtifactBuilding, ArtifactCleanupPending, ArtifactDeleting},
	ArtifactCleanupPending: {ArtifactReady, ArtifactDeleting},
	ArtifactDeleting:       {ArtifactCleanupPending},
}

// ParseArtifactStatus validates a stored status.
func ParseArtifactStatus(s string) (ArtifactStatus, error) {
	st := ArtifactStatus(s)
	if _, ok := artifactEdges[st]; !ok {
		return "", fieldErr("artifact_status", "unknown artifact status %q", s)
	}
	return st, nil
}

// CanMoveTo reports whether the artifact state machine allows s -> to.
func (s ArtifactStatus) CanMoveTo(to ArtifactStatus) bool {
	return s == to || slices.Contains(artifactEdges[s], to)
}

// Artifact is a row of t_cube_rootfs_artifact: one ext4 per fingerprint.
type Artifact struct {
	ArtifactID           string
	Fingerprint          string
	SourceImageRef       string
	SourceImageDigest    string
	MasterNodeID         string
	DownloadBaseURL      string // upstream column master_node_ip
	Ext4Path             string
	Ext4SHA256           string
	Ext4SizeBytes        int64
	ImageConfigJSON      string
	GeneratedRequestJSON string
	WritableLayerSize    string
	DownloadToken        string
	Status               ArtifactStatus
	LastError            string
	GCDeadline           int64 // unix seconds; 0 = none
	StorageBackend       string
	ObjectKey            string
	// CubeEgressCABaked says the CubeEgress root CA with
	// CubeEgressCAFingerprint is in the image's trust stores, in
	// CubeEgressCATargetsWritten places (upstream's columns).
	CubeEgressCABaked          bool
	CubeEgressCAFingerprint    string
	CubeEgressCATargetsWritten int64
	// BuildOwnerToken is unique to the build that last claimed the row
	// (BUILDING); that build only finishes the row while it still carries
	// it, so a build that lost its lock cannot overwrite a newer one.
	BuildOwnerToken string
	// Builder is the Format of the builder that wrote the bytes
	// (ports.RootfsBuilder: its name and versions, e.g. "ext4stream/3").
	// Empty when it is not known: rows written before it was recorded,
	// by upstream, or by a migrate upload of legacy bytes.
	Builder   string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// MoveTo changes the status if the state machine allows it.
func (a *Artifact) MoveTo(to ArtifactStatus) error {
	if !a.Status.CanMoveTo(to) {
		return fmt.Errorf("artifact %s: %s -> %s: %w", a.ArtifactID, a.Status, to, ErrInvalidTransition)
	}
	a.Status = to
	return nil
}

// Placement records that a node holds (or held) a copy of an artifact; rows
// stay until the artifact is fully cleaned up.
type Placement struct {
	ArtifactID string
	NodeID     string
	NodeIP     string
	CreatedAt  time.Time
}

// UploadedArtifact describes artifact bytes a migrate upload stored and
// verified in the artifact store.
type UploadedArtifact struct {
	ArtifactID     string
	ObjectKey      string
	StorageBackend string
	SHA256         string
	SizeBytes      int64
}
