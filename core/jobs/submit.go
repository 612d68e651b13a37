package jobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// maxSubmitRounds bounds how often Submit re-reads after losing an insert
// race; each lost round means another submitter committed in between.
const maxSubmitRounds = 8

// Service applies the job rules through the store.
type Service struct {
	Store ports.Store
	IDs   ports.IDs
}

// SubmitResult is the outcome of a submit.
type SubmitResult struct {
	Job *core.Job
	// Created is false when an identical active request was found and its
	// job returned (idempotent resubmit).
	Created bool
}

// SubmitFromImage validates and normalizes req, then returns the job that
// builds it:
//
//   - a definition that exists and is not FAILED: core.ErrDuplicateTemplate;
//   - an active job with the same canonical request: that job (Created=false);
//   - an active job with a different request: *core.ActiveJobError naming it;
//   - otherwise a new PENDING job (attempt = latest + 1).
//
// The database's unique active key decides races between submitters: the
// loser's insert fails with core.ErrConflict and it re-reads the winner.
func (s *Service) SubmitFromImage(ctx context.Context, req *core.FromImageRequest) (SubmitResult, error) {
	if err := core.NormalizeFromImageRequest(req, s.IDs.NewHex); err != nil {
		return SubmitResult{}, err
	}
	requestJSON, err := core.CanonicalRequestJSON(req)
	if err != nil {
		return SubmitResult{}, err
	}
	key := core.ActiveKeyFromImage(req.TemplateID)
	for round := 0; round < maxSubmitRounds; round++ {
		res, retry, err := s.submitRound(ctx, req, requestJSON, key)
		if err != nil || !retry {
			return res, err
		}
	}
	return SubmitResult{}, fmt.Errorf("submit template %s: lost %d insert races: %w", req.TemplateID, maxSubmitRounds, core.ErrConflict)
}

func (s *Service) submitRound(ctx context.Context, req *core.FromImageRequest, requestJSON, key string) (SubmitResult, bool, error) {
	repos := s.Store
	// The active job is checked first: while the resume pipeline of an
	// identical request runs, its definition already exists, and the
	// resubmit must still get the running job back.
	if active, err := repos.Jobs().GetActive(ctx, key); err == nil {
		if active.RequestJSON == requestJSON {
			return SubmitResult{Job: active}, false, nil
		}
		return SubmitResult{}, false, &core.ActiveJobError{TemplateID: req.TemplateID, JobID: active.JobID, Status: active.Status}
	} else if !errors.Is(err, core.ErrNotFound) {
		return SubmitResult{}, false, fmt.Errorf("read active job of %s: %w", req.TemplateID, err)
	}

	def, err := repos.Templates().GetDefinition(ctx, req.TemplateID)
	switch {
	case err == nil && def.Status != core.TemplateFailed:
		return SubmitResult{}, false, fmt.Errorf("template %s already exists (%s); rootfs template specs are immutable, delete it or use redo: %w",
			req.TemplateID, def.Status, core.ErrDuplicateTemplate)
	case err != nil && !errors.Is(err, core.ErrNotFound):
		return SubmitResult{}, false, fmt.Errorf("read template %s: %w", req.TemplateID, err)
	}

	job := &core.Job{
		JobID:             s.IDs.NewJobID(),
		TemplateID:        req.TemplateID,
		AttemptNo:         1,
		Operation:         core.OpCreate,
		SourceImageRef:    req.SourceImageRef,
		WritableLayerSize: req.WritableLayerSize,
		InstanceType:      req.InstanceType,
		NetworkType:       req.NetworkType,
		Status:            core.JobPending,
		Phase:             core.PhasePulling,
		RequestJSON:       requestJSON,
		ActiveKey:         key,
	}
	latest, err := repos.Jobs().Latest(ctx, req.TemplateID)
	switch {
	case err == nil:
		job.AttemptNo = latest.AttemptNo + 1
		job.RetryOfJobID = latest.JobID
	case !errors.Is(err, core.ErrNotFound):
		return SubmitResult{}, false, fmt.Errorf("read latest job of %s: %w", req.TemplateID, err)
	}
	if err := repos.Jobs().Create(ctx, job); err != nil {
		if errors.Is(err, core.ErrConflict) {
			return SubmitResult{}, true, nil
		}
		return SubmitResult{}, false, fmt.Errorf("create job for %s: %w", req.TemplateID, err)
	}
	return SubmitResult{Job: job, Created: true}, false, nil
}

// Report applies a status report to a job. A stale or duplicate report is
// harmless: it returns the job unchanged with applied=false and no error.
func (s *Service) Report(ctx context.Context, jobID string, u core.JobUpdate) (job *core.Job, applied bool, err error) {
	stale := false
	job, err = s.Store.Jobs().Update(ctx, jobID, func(j *core.Job) error {
		stale = false
		if err := j.Apply(u); err != nil {
			if errors.Is(err, core.ErrStaleUpdate) {
				stale = true
			}
			return err
		}
		return nil
	})
	if stale {
		cur, gerr := s.Store.Jobs().Get(ctx, jobID)
		if gerr != nil {
			return nil, false, gerr
		}
		return cur, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("report job %s: %w", jobID, err)
	}
	return job, true, nil
}
