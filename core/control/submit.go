package control

import (
	"context"
	"errors"
	"fmt"

	"github.com/cubesandbox/templatecenter/core"
)

// maxSubmitRounds bounds how often a submit re-reads after losing an insert
// race; each lost round means another submitter committed in between.
const maxSubmitRounds = 8

// SubmitResult is the outcome of a submit.
type SubmitResult struct {
	Job *core.Job
	// Created is false when an identical active request was found and its
	// job returned (idempotent resubmit).
	Created bool
}

// jobPlan is what one kind of job (create, redo, migrate) decides when it
// is submitted under invariant I1 (one active job per template and kind).
type jobPlan struct {
	// templateID and key name the template and its active key.
	templateID string
	key        string
	// onActive decides what a job already holding the key means: hand it
	// back (an idempotent resubmit) or refuse with an error.
	onActive func(active *core.Job) (*core.Job, error)
	// build makes the new PENDING job; latest is the template's latest job
	// (nil if none). submitJob sets the attempt, the retry link and the
	// active key.
	build func(ctx context.Context, latest *core.Job) (*core.Job, error)
	// alias, when set, is claimed for the template with its id.
	alias string
}

// submitJob creates the job p plans, or returns the active job p.onActive
// accepts. It is the one place jobs are created: create, redo and migrate
// all submit through it. The database's unique active key decides races
// between submitters: the loser's insert fails with core.ErrConflict and it
// reads the winner in the next round.
func (s *Service) submitJob(ctx context.Context, p jobPlan) (SubmitResult, error) {
	jobs := s.Store.Jobs()
	for range maxSubmitRounds {
		active, err := jobs.GetActive(ctx, p.key)
		switch {
		case err == nil:
			job, err := p.onActive(active)
			return SubmitResult{Job: job}, err
		case !errors.Is(err, core.ErrNotFound):
			return SubmitResult{}, fmt.Errorf("read active job of %s: %w", p.templateID, err)
		}
		latest, err := jobs.Latest(ctx, p.templateID)
		switch {
		case errors.Is(err, core.ErrNotFound):
			latest = nil
		case err != nil:
			return SubmitResult{}, fmt.Errorf("read latest job of %s: %w", p.templateID, err)
		}
		job, err := p.build(ctx, latest)
		if err != nil {
			return SubmitResult{}, err
		}
		job.TemplateID, job.ActiveKey, job.AttemptNo, job.RetryOfJobID = p.templateID, p.key, 1, ""
		if latest != nil {
			job.AttemptNo, job.RetryOfJobID = latest.AttemptNo+1, latest.JobID
		}
		// The template's names are claimed first: the database refuses an
		// id that is another template's alias (or an alias that is
		// another's id or alias) before anything of the job is written.
		// A claim is idempotent for its own template, so concurrent
		// submitters of one template all pass it and the active key
		// decides between them.
		err = s.claimNames(ctx, p.templateID, p.alias)
		if err == nil {
			err = jobs.Create(ctx, job.Clone())
		}
		var taken *core.NameTakenError
		if errors.As(err, &taken) {
			return SubmitResult{}, fmt.Errorf("submit template %s: %w", p.templateID, err)
		}
		if errors.Is(err, core.ErrConflict) {
			continue // another submitter won; the next round reads its job
		}
		if err != nil {
			return SubmitResult{}, fmt.Errorf("create job for %s: %w", p.templateID, err)
		}
		return SubmitResult{Job: job, Created: true}, nil
	}
	return SubmitResult{}, fmt.Errorf("submit job for %s: lost %d insert races: %w", p.templateID, maxSubmitRounds, core.ErrConflict)
}

// claimNames claims the template's id and, if set, alias.
func (s *Service) claimNames(ctx context.Context, templateID, alias string) error {
	if err := s.Store.Names().Claim(ctx, templateID, templateID, core.NameID); err != nil {
		return err
	}
	if alias != "" {
		return s.claimAlias(ctx, templateID, alias)
	}
	return nil
}

// SubmitFromImage validates and normalizes req, then returns the job that
// builds it, without forwarding it to the data plane (CreateFromImage
// does both):
//
//   - an active job with the same canonical request: that job (Created=false);
//   - an active job with a different request: *core.ActiveJobError naming it;
//   - a definition that exists and is not FAILED: core.ErrDuplicateTemplate;
//   - otherwise a new PENDING job (attempt = latest + 1).
//
// The active job is checked first: while the resume pipeline of an
// identical request runs, its definition already exists, and the resubmit
// must still get the running job back. The template's lock keeps a delete
// of the same template from interleaving with the submit.
func (s *Service) SubmitFromImage(ctx context.Context, req *core.FromImageRequest) (SubmitResult, error) {
	if err := core.NormalizeFromImageRequest(req, s.IDs.NewHex); err != nil {
		return SubmitResult{}, err
	}
	requestJSON, err := core.CanonicalRequestJSON(req)
	if err != nil {
		return SubmitResult{}, err
	}
	tid := req.TemplateID
	auth, err := s.sealAuth(req)
	if err != nil {
		return SubmitResult{}, err
	}
	lock, err := s.lockTemplate(ctx, tid)
	if err != nil {
		return SubmitResult{}, fmt.Errorf("submit template %s: %w", tid, err)
	}
	defer s.unlock(ctx, lock)
	return s.submitJob(ctx, jobPlan{
		templateID: tid,
		key:        core.ActiveKeyFromImage(tid),
		alias:      req.Alias,
		onActive: func(active *core.Job) (*core.Job, error) {
			if active.RequestJSON == requestJSON {
				return active, nil
			}
			return nil, &core.ActiveJobError{TemplateID: tid, JobID: active.JobID, Status: active.Status}
		},
		build: func(ctx context.Context, _ *core.Job) (*core.Job, error) {
			def, err := s.Store.Templates().GetDefinition(ctx, tid)
			switch {
			case err == nil && def.Status != core.TemplateFailed:
				return nil, fmt.Errorf("template %s already exists (%s); rootfs template specs are immutable, delete it or use redo: %w",
					tid, def.Status, core.ErrDuplicateTemplate)
			case err != nil && !errors.Is(err, core.ErrNotFound):
				return nil, fmt.Errorf("read template %s: %w", tid, err)
			}
			return &core.Job{
				JobID:             s.IDs.NewJobID(),
				Operation:         core.OpCreate,
				SourceImageRef:    req.SourceImageRef,
				WritableLayerSize: req.WritableLayerSize,
				InstanceType:      req.InstanceType,
				NetworkType:       req.NetworkType,
				Status:            core.JobPending,
				Phase:             core.PhasePulling,
				RequestJSON:       requestJSON,
				RegistryAuth:      auth,
				RequestID:         req.RequestID,
			}, nil
		},
	})
}

// Report applies a status update to a job under the job state machine. A stale or duplicate update is
// harmless: it returns the job unchanged with applied=false and no error.
func (s *Service) Report(ctx context.Context, jobID string, u core.JobUpdate) (job *core.Job, applied bool, err error) {
	if u.Fence == 0 {
		u.Fence = fenceOf(ctx, jobID)
	}
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
