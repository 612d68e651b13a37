package entstore

import (
	"context"
	"fmt"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ent"
	"github.com/cubesandbox/templatecenter/ent/predicate"
	tij "github.com/cubesandbox/templatecenter/ent/templateimagejob"
	"github.com/cubesandbox/templatecenter/ports"
)

// maxCASRounds bounds how often Update re-reads a job after losing the
// compare-and-set to another writer. Every lost round means some other
// writer succeeded, so this only runs out under heavy contention on one job.
const maxCASRounds = 64

type jobRepo struct{ sc scope }

func (r jobRepo) Create(ctx context.Context, job *core.Job) error {
	if job == nil {
		return fmt.Errorf("create job: %w", core.ErrInvalidArgument)
	}
	t := r.sc.s.now()
	row := job.Clone()
	row.CreatedAt, row.UpdatedAt = t, t
	err := r.sc.do(ctx, func(c *ent.Client) error {
		// Soft-deleted jobs of the template could hold its next attempt
		// number, the active key or the request key.
		if err := r.sc.purgeSoftDeleted(ctx, c, "t_cube_template_image_job", "job_id = ? OR template_id = ? OR request_id = ?", job.JobID, job.TemplateID, row.RequestID); err != nil {
			return err
		}
		if row.ActiveKey != "" {
			if err := r.sc.purgeSoftDeleted(ctx, c, "t_cube_template_image_job", "active_key = ?", row.ActiveKey); err != nil {
				return err
			}
		}
		// (request_id, operation) is unique, as upstream keys its
		// idempotency on it: a request id seen before for this operation
		// (a client retrying after a failed job) gets the job id appended,
		// as upstream's normalization does.
		if row.RequestID == "" {
			row.RequestID = job.JobID
		} else if n, err := c.TemplateImageJob.Query().Where(tij.RequestID(row.RequestID), tij.Operation(string(row.Operation))).Count(ctx); err != nil {
			return err
		} else if n > 0 {
			row.RequestID = core.DistinctRequestID(row.RequestID, job.JobID)
		}
		b := c.TemplateImageJob.Create().SetJobID(job.JobID).SetTemplateID(job.TemplateID).SetCreatedAt(t)
		if err := setJob(b.Mutation(), row, false); err != nil {
			return err
		}
		return b.Exec(ctx)
	})
	if err != nil {
		return mapErr(err, "create job "+job.JobID)
	}
	job.CreatedAt, job.UpdatedAt, job.RequestID = t, t, row.RequestID
	return nil
}

func (r jobRepo) one(ctx context.Context, what string, lock bool, ps ...predicate.TemplateImageJob) (*core.Job, error) {
	var out *core.Job
	err := r.sc.do(ctx, func(c *ent.Client) error {
		q := c.TemplateImageJob.Query().Where(ps...)
		if lock {
			q = q.ForUpdate()
		}
		e, err := q.Only(ctx)
		if err != nil {
			return err
		}
		out, err = jobFromEnt(e)
		return err
	})
	if err != nil {
		return nil, mapErr(err, what)
	}
	return out, nil
}

func (r jobRepo) Get(ctx context.Context, jobID string) (*core.Job, error) {
	return r.one(ctx, "job "+jobID, false, tij.JobID(jobID))
}

func (r jobRepo) GetActive(ctx context.Context, activeKey string) (*core.Job, error) {
	if activeKey == "" {
		return nil, fmt.Errorf("active job: empty key: %w", core.ErrNotFound)
	}
	return r.one(ctx, "active job "+activeKey, false, tij.ActiveKey(activeKey))
}

func (r jobRepo) Latest(ctx context.Context, templateID string) (*core.Job, error) {
	var out *core.Job
	err := r.sc.do(ctx, func(c *ent.Client) error {
		e, err := c.TemplateImageJob.Query().Where(tij.TemplateID(templateID)).
			Order(ent.Desc(tij.FieldAttemptNo)).First(ctx)
		if err != nil {
			return err
		}
		out, err = jobFromEnt(e)
		return err
	})
	if err != nil {
		return nil, mapErr(err, "latest job of template "+templateID)
	}
	return out, nil
}

func (r jobRepo) list(ctx context.Context, what string, build func(q *ent.TemplateImageJobQuery) *ent.TemplateImageJobQuery) ([]*core.Job, error) {
	var out []*core.Job
	err := r.sc.do(ctx, func(c *ent.Client) error {
		es, err := build(c.TemplateImageJob.Query()).All(ctx)
		if err != nil {
			return err
		}
		out = make([]*core.Job, 0, len(es))
		for _, e := range es {
			j, err := jobFromEnt(e)
			if err != nil {
				return err
			}
			out = append(out, j)
		}
		return nil
	})
	if err != nil {
		return nil, mapErr(err, what)
	}
	return out, nil
}

func (r jobRepo) ListByTemplate(ctx context.Context, templateID string) ([]*core.Job, error) {
	return r.list(ctx, "jobs of template "+templateID, func(q *ent.TemplateImageJobQuery) *ent.TemplateImageJobQuery {
		return q.Where(tij.TemplateID(templateID)).Order(ent.Asc(tij.FieldAttemptNo))
	})
}

func (r jobRepo) ListStale(ctx context.Context, sq ports.StaleQuery) ([]*core.Job, error) {
	var ps []predicate.TemplateImageJob
	if len(sq.Statuses) > 0 {
		ps = append(ps, tij.StatusIn(strs(sq.Statuses)...))
	}
	if len(sq.Phases) > 0 {
		ps = append(ps, tij.PhaseIn(strs(sq.Phases)...))
	}
	if len(sq.ExcludePhases) > 0 {
		ps = append(ps, tij.PhaseNotIn(strs(sq.ExcludePhases)...))
	}
	if !sq.UpdatedBefore.IsZero() {
		ps = append(ps, tij.UpdatedAtLT(sq.UpdatedBefore.UTC()))
	}
	return r.list(ctx, "stale jobs", func(q *ent.TemplateImageJobQuery) *ent.TemplateImageJobQuery {
		if sq.NewestFirst {
			q = q.Where(ps...).Order(ent.Desc(tij.FieldUpdatedAt), ent.Desc(tij.FieldID))
		} else {
			q = q.Where(ps...).Order(ent.Asc(tij.FieldUpdatedAt), ent.Asc(tij.FieldID))
		}
		if sq.Limit > 0 {
			q = q.Limit(sq.Limit)
		}
		return q
	})
}

func strs[T ~string](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

// Update is a compare-and-set: the UPDATE matches only while the row still
// has the status and updated_at that were read. Inside a transaction on
// MySQL/PostgreSQL the read takes a row lock, so the first round wins (and
// a repeatable-read snapshot cannot make it loop on stale data).
func (r jobRepo) Update(ctx context.Context, jobID string, fn func(*core.Job) error) (*core.Job, error) {
	for round := 1; ; round++ {
		cur, err := r.one(ctx, "job "+jobID, r.sc.lockRows(), tij.JobID(jobID))
		if err != nil {
			return nil, err
		}
		next := cur.Clone()
		if err := fn(next); err != nil {
			return nil, err
		}
		// Identity is not fn's to change.
		next.JobID, next.TemplateID, next.CreatedAt = cur.JobID, cur.TemplateID, cur.CreatedAt
		next.UpdatedAt = r.sc.s.after(cur.UpdatedAt)

		var n int
		err = r.sc.do(ctx, func(c *ent.Client) error {
			u := c.TemplateImageJob.Update().
				Where(tij.JobID(jobID), tij.Status(string(cur.Status)), tij.UpdatedAt(cur.UpdatedAt))
			if err := setJob(u.Mutation(), next, true); err != nil {
				return err
			}
			var err error
			n, err = u.Save(ctx)
			return err
		})
		if err != nil {
			return nil, mapErr(err, "update job "+jobID)
		}
		if n > 0 {
			return next, nil
		}
		if round == maxCASRounds {
			return nil, fmt.Errorf("update job %s: lost %d compare-and-set rounds to concurrent writers: %w", jobID, round, core.ErrConflict)
		}
		if err := pause(ctx, min(round, 4)); err != nil {
			return nil, err
		}
	}
}

func (r jobRepo) DeleteByTemplate(ctx context.Context, templateID string) (int, error) {
	var n int
	err := r.sc.do(ctx, func(c *ent.Client) error {
		var err error
		n, err = c.TemplateImageJob.Delete().Where(tij.TemplateID(templateID)).Exec(ctx)
		return err
	})
	return n, mapErr(err, "delete jobs of template "+templateID)
}
