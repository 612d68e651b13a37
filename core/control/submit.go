package control

import (
	"context"
	"errors"
	"fmt"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
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
	// replaceAlias: this submit decides the template's alias (a create,
	// which replaces a failed attempt): alias names the template holds
	// from an earlier attempt are released, and a FAILED definition's
	// alias cleared, in the transaction that claims the new one.
	replaceAlias bool
	// lock is the template's lock the submit holds: nothing is written
	// once it is lost.
	lock ports.Lock
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
		case err == nil && s.freeAbandoned(ctx, active):
			continue // its data plane died: failed now, out of the way
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
		if p.lock != nil {
			if err := stillHeld(ctx, p.lock); err != nil {
				return SubmitResult{}, fmt.Errorf("submit template %s: %w", p.templateID, err)
			}
		}
		err = s.claimNames(ctx, p.templateID, p.alias, p.replaceAlias)
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

// claimNames claims the template's id and, if set, alias. With replace the
// alias is the template's only alias afterwards: what an earlier attempt
// claimed is released, and a definition left by it (FAILED: a create
// replaces nothing else) loses an alias that is not this one, in the
// transaction that claims the new alias; the resume sets it on the
// definition.
func (s *Service) claimNames(ctx context.Context, templateID, alias string, replace bool) error {
	names := s.Store.Names()
	if err := names.Claim(ctx, templateID, templateID, core.NameID); err != nil {
		return err
	}
	if !replace {
		if alias != "" {
			return claimAlias(ctx, names, templateID, alias)
		}
		return nil
	}
	err := s.Store.Tx(ctx, func(ctx context.Context, r ports.Repos) error {
		if _, err := r.Names().Release(ctx, templateID, core.NameAlias); err != nil {
			return err
		}
		_, err := r.Templates().UpdateDefinition(ctx, templateID, func(d *core.Definition) error {
			if d.Alias != alias {
				d.Alias = ""
			}
			return nil
		})
		if err != nil && !isNotFound(err) {
			return err
		}
		if alias != "" {
			return claimAlias(ctx, r.Names(), templateID, alias)
		}
		return nil
	})
	var taken *core.NameTakenError
	if alias != "" && errors.As(err, &taken) {
		// A concurrent claim inside a transaction hides who made it; a
		// submitter of the same template claiming the same alias is fine,
		// and another template's alias moves here once READY.
		if holder, kind, herr := names.Holder(ctx, alias); herr == nil {
			if kind == core.NameAlias {
				return nil
			}
			return fmt.Errorf("claim name %q for %s: %w", alias, templateID, &core.NameTakenError{Name: alias, Holder: holder, HolderKind: kind})
		}
	}
	return err
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
	n, err := core.NormalizeFromImageRequest(req, s.IDs.NewHex)
	if err != nil {
		return SubmitResult{}, err
	}
	return s.submitFromImage(ctx, n)
}

// submitFromImage is SubmitFromImage past the request's normalization.
func (s *Service) submitFromImage(ctx context.Context, n core.NormalizedRequest) (SubmitResult, error) {
	req := n.Request()
	requestJSON, err := core.CanonicalRequestJSON(n)
	if err != nil {
		return SubmitResult{}, err
	}
	tid := req.TemplateID
	auth, err := s.sealAuth(req)
	if err != nil {
		return SubmitResult{}, err
	}
	ctx, lock, done, err := s.holdTemplate(ctx, tid)
	if err != nil {
		return SubmitResult{}, fmt.Errorf("submit template %s: %w", tid, err)
	}
	defer done()
	return s.submitJob(ctx, jobPlan{
		templateID:   tid,
		key:          core.ActiveKeyFromImage(tid),
		alias:        req.Alias,
		replaceAlias: true,
		lock:         lock,
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
	return s.reportIf(ctx, jobID, u, nil)
}

// reportIf is Report with a precondition: guard (when not nil) sees the
// job as stored, in the same compare-and-set, and an error from it that
// wraps core.ErrStaleUpdate makes the update stale (applied=false).
func (s *Service) reportIf(ctx context.Context, jobID string, u core.JobUpdate, guard func(*core.Job) error) (job *core.Job, applied bool, err error) {
	if u.Fence == 0 {
		u.Fence = fenceOf(ctx, jobID)
	}
	stale := false
	job, err = s.Store.Jobs().Update(ctx, jobID, func(j *core.Job) error {
		stale = false
		err := error(nil)
		if guard != nil {
			err = guard(j)
		}
		if err == nil {
			err = j.Apply(u)
		}
		if errors.Is(err, core.ErrStaleUpdate) {
			stale = true
		}
		return err
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
