package ports

import (
	"context"

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
}

// BuildDispatcher is the control plane's client of the data plane.
type BuildDispatcher interface {
	// SubmitBuild hands a PENDING job to the data plane. core.ErrBusy when
	// the data plane is at capacity, core.ErrConflict when already in flight.
	SubmitBuild(ctx context.Context, req BuildRequest) error
	// DeleteArtifact asks the data plane to remove the artifact's bytes and
	// row; idempotent.
	DeleteArtifact(ctx context.Context, artifactID string) error
}

// StatusReport is one status callback from the data plane.
type StatusReport struct {
	Update core.JobUpdate
	// Artifact carries the built artifact's metadata with a BUILT report.
	Artifact *core.Artifact
}

// StatusReporter is the data plane's client of the control plane callback.
type StatusReporter interface {
	Report(ctx context.Context, jobID string, r StatusReport) error
}
