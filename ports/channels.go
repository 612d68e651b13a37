package ports

import (
	"context"
	"io"

	"github.com/cubesandbox/templatecenter/core"
)

// LiveProgress is a job's live progress, kept outside the database.
type LiveProgress struct {
	Phase    core.Phase
	Progress int
	Pull     core.PullProgress
}

// ProgressSink keeps live progress where any replica can read it.
type ProgressSink interface {
	Publish(ctx context.Context, jobID string, p LiveProgress) error
	// Get returns the last published progress; ok is false if none.
	Get(ctx context.Context, jobID string) (p LiveProgress, ok bool, err error)
	Delete(ctx context.Context, jobID string) error
}

// BuildRequest is what the control plane sends the data plane.
type BuildRequest struct {
	JobID           string
	Request         *core.FromImageRequest
	DownloadBaseURL string
	EnvdSHA256      string
	EnvdData        []byte
	// CubeCA is the control plane's CubeEgress root CA (one PEM
	// certificate) for a request that wants it baked; nil leaves the data
	// plane to its own (an upstream master sends none).
	CubeCA []byte
}

// StoredObject says where the data plane's artifact store keeps uploaded
// bytes.
type StoredObject struct {
	ObjectKey      string
	StorageBackend string
}

// DataPlane is the control plane's client of the data plane (the template
// center): the only way cubemaster reaches builds and artifact bytes.
//
// Job and artifact ids are 1 to 128 letters, digits, '.', '_' and '-',
// starting with a letter or digit (they become store keys and URL parts);
// SubmitBuild, DeleteArtifact and UploadArtifact refuse any other id with
// an error wrapping core.ErrInvalidArgument before anything is sent. No
// error carries a secret (the shared token, a download token, a registry
// password).
type DataPlane interface {
	// SubmitBuild hands a PENDING job to the data plane. core.ErrBusy when
	// the data plane is at capacity, core.ErrConflict when already in
	// flight (also at capacity); a refused build is not taken.
	SubmitBuild(ctx context.Context, req BuildRequest) error
	// DeleteArtifact asks the data plane to remove the artifact's bytes and
	// row; idempotent (a missing artifact is not an error).
	DeleteArtifact(ctx context.Context, artifactID string) error
	// ArtifactExists reports whether a's bytes are in the data plane's
	// store, asked the way nodes download them: with a's download token. A
	// row that is not READY cannot be asked and is reported present (the
	// data plane deletes bytes and row together). A READY row without a
	// download token cannot be asked either, and is an error wrapping
	// core.ErrInvalidArgument, with nothing sent: the caller gives the row
	// its token first. Any answer other than present or absent is an
	// error, never a guess.
	ArtifactExists(ctx context.Context, a *core.Artifact) (bool, error)
	// UploadArtifact moves an artifact's bytes into the data plane's store
	// (migrate). body yields exactly info.Size bytes whose sha256 is
	// info.SHA256; the data plane verifies both before anything becomes
	// visible (a mismatch is an error wrapping core.ErrInvalidArgument or
	// core.ErrConflict, and nothing is stored) and answers an identical
	// earlier upload as done. A body shorter or longer than info.Size is a
	// mismatch, and so are bytes other than those the artifact records or
	// already has stored, which are never replaced.
	UploadArtifact(ctx context.Context, artifactID string, body io.Reader, info ObjectInfo) (StoredObject, error)
}

// StatusReport is one status callback from the data plane.
type StatusReport struct {
	// Update is what the data plane knows of the job. Status, Phase,
	// Progress (0-100), ErrorMessage (nil leaves it, "" clears it),
	// ArtifactID, Fingerprint, SourceImageDigest, ArtifactStatus, Pull and
	// PhaseDurations (to the millisecond) are delivered; TemplateStatus,
	// ResultJSON and the node counts are the control plane's and are not.
	Update core.JobUpdate
	// Artifact carries the built artifact's metadata with a BUILT report:
	// ArtifactID, Fingerprint, SourceImageRef, SourceImageDigest,
	// DownloadBaseURL, Ext4Path, Ext4SHA256 (lowercase hex), Ext4SizeBytes,
	// ImageConfigJSON, WritableLayerSize, Status, StorageBackend and
	// ObjectKey. The rest (download token, master node id, generated
	// request, row bookkeeping) is the control plane's and is not
	// delivered. Its ids and fingerprint agree with Update's.
	Artifact *core.Artifact
	// Inputs come with a BUILT report: what the build's fingerprint was
	// computed from beyond the job's request (core.FingerprintOf), so the
	// control plane can check that the artifact is the one of the job's
	// own spec. Once checked, Inputs.Builder (the builder's Format) is
	// recorded as the artifact's Builder.
	Inputs *core.BuildInputs
}

// StatusReporter is the data plane's client of the control plane callback.
type StatusReporter interface {
	// Report delivers r for the job. A failure retrying may fix (no
	// answer, a control plane that fails or is overloaded) is retried a
	// bounded number of times while ctx lasts; a refusal is returned after
	// one attempt: an unknown job (an error wrapping core.ErrNotFound), a
	// report the job's state machine refuses, a malformed report, a refused
	// token. A duplicate or late report the control plane acknowledges
	// without applying is success. Once ctx ends Report returns an error
	// wrapping ctx's. A job id outside the DataPlane id alphabet is refused
	// with an error wrapping core.ErrInvalidArgument before anything is
	// sent; no error carries the token.
	Report(ctx context.Context, jobID string, r StatusReport) error
}
