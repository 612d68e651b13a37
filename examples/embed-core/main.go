// Command embed-core uses CubeTemplateCenter as a library, in process: it
// opens the embedded SQLite store, submits from-image jobs through
// core/control.Service and feeds it status reports, printing what the job rules
// decide. No server, registry or builder is involved.
//
//	go run ./examples/embed-core
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"

	"github.com/cubesandbox/templatecenter/adapters/lock/memlock"
	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/adapters/system"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
)

func main() {
	dir, err := os.MkdirTemp("", "embed-core-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := run(context.Background(), os.Stdout, filepath.Join(dir, "tc.db")); err != nil {
		log.Fatal(err) // the deferred RemoveAll is skipped; the temp dir stays for inspection
	}
}

// request is the from-image request the example submits. A fresh value per
// call: SubmitFromImage normalizes its argument in place.
func request(size string) *core.FromImageRequest {
	return &core.FromImageRequest{
		TemplateID:        "tpl-embed-demo",
		SourceImageRef:    "docker.io/library/alpine:3.20",
		WritableLayerSize: size,
	}
}

func run(ctx context.Context, w io.Writer, dbPath string) error {
	// The store is the only adapter the job rules need. Open picks the
	// dialect from the DSN; Migrate applies the versioned SQL migrations.
	store, err := entstore.Open(ctx, "sqlite://"+dbPath)
	if err != nil {
		return err
	}
	defer store.Close()
	applied, err := store.Migrate(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "store: %s, %d migrations applied\n", store.Dialect(), len(applied))

	svc := &control.Service{Store: store, Locker: memlock.New(), IDs: system.IDs{}}

	// 1. A new request creates a PENDING job.
	first, err := svc.SubmitFromImage(ctx, request("1Gi"))
	if err != nil {
		return err
	}
	job := first.Job
	fmt.Fprintf(w, "submit:    job %s attempt %d %s (created=%t)\n", job.JobID, job.AttemptNo, job.Status, first.Created)

	// 2. The same request again, with a new requestID (not part of the
	// idempotency key), returns the same job instead of a second one.
	again := request("1Gi")
	again.RequestID = "client-retry-1"
	second, err := svc.SubmitFromImage(ctx, again)
	if err != nil {
		return err
	}
	if second.Created || second.Job.JobID != job.JobID {
		return fmt.Errorf("resubmit made job %s, want the existing %s", second.Job.JobID, job.JobID)
	}
	fmt.Fprintf(w, "resubmit:  job %s again (created=%t)\n", second.Job.JobID, second.Created)

	// 3. A different request for the same template is refused while the
	// job is active (invariant I1); the error names the job to poll.
	_, err = svc.SubmitFromImage(ctx, request("2Gi"))
	var active *core.ActiveJobError
	if !errors.As(err, &active) || active.JobID != job.JobID {
		return fmt.Errorf("different request: got %v, want an *core.ActiveJobError naming %s", err, job.JobID)
	}
	fmt.Fprintf(w, "different: refused: %v\n", err)

	// 4. Status reports, as the data plane sends them. A late report that
	// would move the job backwards is ignored without an error.
	reports := []struct {
		what string
		u    core.JobUpdate
	}{
		{"RUNNING/PULLING 10%", core.Progress(core.JobRunning, core.PhasePulling, 10)},
		{"RUNNING/BUILDING_EXT4 60%", core.Progress(core.JobRunning, core.PhaseBuildingExt4, 60)},
		{"late RUNNING/PULLING 30%", core.Progress(core.JobRunning, core.PhasePulling, 30)},
		{"FAILED in BUILDING_EXT4", core.Fail(core.PhaseBuildingExt4, "demo: disk full")},
		{"late RUNNING/UPLOADING 90%", core.Progress(core.JobRunning, core.PhaseUploading, 90)},
	}
	for _, r := range reports {
		j, appliedNow, err := svc.Report(ctx, job.JobID, r.u)
		if err != nil {
			return err
		}
		verdict := "applied"
		if !appliedNow {
			verdict = "ignored (stale)"
		}
		fmt.Fprintf(w, "report %-27s %-16s -> job %s/%s %d%%\n", r.what+":", verdict, j.Status, j.Phase, j.Progress)
	}

	// 5. A terminal job frees the template: the different request now
	// becomes attempt 2, linked to the failed one.
	retry, err := svc.SubmitFromImage(ctx, request("2Gi"))
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "retry:     job %s attempt %d %s (retry of %s)\n",
		retry.Job.JobID, retry.Job.AttemptNo, retry.Job.Status, retry.Job.RetryOfJobID)
	return nil
}
