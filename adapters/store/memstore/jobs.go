package memstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

type jobRepo struct{ sc scope }

// checkJob refuses what the SQL store could not read back: missing keys and
// unknown statuses, phases or operations.
func checkJob(j *core.Job) error {
	if err := required("job_id", j.JobID); err != nil {
		return err
	}
	if err := required("template_id", j.TemplateID); err != nil {
		return err
	}
	if _, err := core.ParseJobStatus(string(j.Status)); err != nil {
		return err
	}
	if _, err := core.ParsePhase(string(j.Phase)); err != nil {
		return err
	}
	if _, err := core.ParsePhase(string(j.ResumePhase)); err != nil {
		return err
	}
	_, err := core.ParseOperation(string(j.Operation))
	return err
}

// clash reports the unique key of j another row (any but self) holds: the
// job id, (template id, attempt) or the active key, which is unique only
// when set (NULLs are distinct).
func (st *state) clash(j *core.Job, self string) error {
	for id, row := range st.jobs {
		o := row.job
		switch {
		case id == self:
		case id == j.JobID:
			return fmt.Errorf("job id %s is taken: %w", j.JobID, core.ErrConflict)
		case o.TemplateID == j.TemplateID && o.AttemptNo == j.AttemptNo:
			return fmt.Errorf("attempt %d of template %s is job %s: %w", j.AttemptNo, j.TemplateID, id, core.ErrConflict)
		case j.ActiveKey != "" && o.ActiveKey == j.ActiveKey:
			return fmt.Errorf("active key %s is held by job %s: %w", j.ActiveKey, id, core.ErrConflict)
		}
	}
	return nil
}

func (r jobRepo) Create(ctx context.Context, job *core.Job) error {
	if job == nil {
		return fmt.Errorf("create job: %w", core.ErrInvalidArgument)
	}
	if err := checkJob(job); err != nil {
		return fmt.Errorf("create job %s: %w", job.JobID, err)
	}
	row := job.Clone()
	err := r.sc.write(ctx, func(st *state) error {
		if err := st.clash(row, ""); err != nil {
			return err
		}
		if row.RequestID == "" {
			row.RequestID = row.JobID
		} else {
			for _, o := range st.jobs {
				if o.job.RequestID == row.RequestID && o.job.Operation == row.Operation {
					row.RequestID = core.DistinctRequestID(row.RequestID, row.JobID)
					break
				}
			}
		}
		row.CreatedAt = r.sc.s.now()
		row.UpdatedAt = row.CreatedAt
		seq := st.nextRev()
		st.jobs[row.JobID] = jobRow{job: row, seq: seq, rev: seq}
		return nil
	})
	if err != nil {
		return fmt.Errorf("create job %s: %w", job.JobID, err)
	}
	job.CreatedAt, job.UpdatedAt, job.RequestID = row.CreatedAt, row.UpdatedAt, row.RequestID
	return nil
}

// find returns a copy of the first job ok accepts, in no particular order.
func (r jobRepo) find(ctx context.Context, what string, ok func(j *core.Job) bool) (*core.Job, error) {
	var out *core.Job
	err := r.sc.view(ctx, func(st *state) {
		for _, row := range st.jobs {
			if ok(row.job) {
				out = row.job.Clone()
				return
			}
		}
	})
	switch {
	case err != nil:
		return nil, err
	case out == nil:
		return nil, fmt.Errorf("%s: %w", what, core.ErrNotFound)
	}
	return out, nil
}

func (r jobRepo) Get(ctx context.Context, jobID string) (*core.Job, error) {
	var out *core.Job
	err := r.sc.view(ctx, func(st *state) {
		if row, ok := st.jobs[jobID]; ok {
			out = row.job.Clone()
		}
	})
	switch {
	case err != nil:
		return nil, err
	case out == nil:
		return nil, fmt.Errorf("job %s: %w", jobID, core.ErrNotFound)
	}
	return out, nil
}

func (r jobRepo) GetActive(ctx context.Context, activeKey string) (*core.Job, error) {
	if activeKey == "" {
		return nil, fmt.Errorf("active job: empty key: %w", core.ErrNotFound)
	}
	return r.find(ctx, "active job "+activeKey, func(j *core.Job) bool { return j.ActiveKey == activeKey })
}

// list returns copies of the jobs keep accepts, in order.
func (r jobRepo) list(ctx context.Context, keep func(j *core.Job) bool, order func(a, b jobRow) int) ([]*core.Job, error) {
	var rows []jobRow
	err := r.sc.view(ctx, func(st *state) {
		for _, row := range st.jobs {
			if keep(row.job) {
				rows = append(rows, row)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(rows, order)
	out := make([]*core.Job, len(rows))
	for i, row := range rows {
		out[i] = row.job.Clone()
	}
	return out, nil
}

func byAttempt(a, b jobRow) int { return cmp.Compare(a.job.AttemptNo, b.job.AttemptNo) }

func (r jobRepo) Latest(ctx context.Context, templateID string) (*core.Job, error) {
	list, err := r.ListByTemplate(ctx, templateID)
	switch {
	case err != nil:
		return nil, err
	case len(list) == 0:
		return nil, fmt.Errorf("latest job of template %s: %w", templateID, core.ErrNotFound)
	}
	return list[len(list)-1], nil
}

func (r jobRepo) ListByTemplate(ctx context.Context, templateID string) ([]*core.Job, error) {
	return r.list(ctx, func(j *core.Job) bool { return j.TemplateID == templateID }, byAttempt)
}

func (r jobRepo) ListStale(ctx context.Context, q ports.StaleQuery) ([]*core.Job, error) {
	keep := func(j *core.Job) bool {
		return (len(q.Statuses) == 0 || slices.Contains(q.Statuses, j.Status)) &&
			(len(q.Phases) == 0 || slices.Contains(q.Phases, j.Phase)) &&
			!slices.Contains(q.ExcludePhases, j.Phase) &&
			(q.UpdatedBefore.IsZero() || j.UpdatedAt.Before(q.UpdatedBefore))
	}
	order := func(a, b jobRow) int {
		c := cmp.Or(a.job.UpdatedAt.Compare(b.job.UpdatedAt), cmp.Compare(a.seq, b.seq))
		if q.NewestFirst {
			return -c
		}
		return c
	}
	out, err := r.list(ctx, keep, order)
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out, err
}

// Update is a compare-and-set on the row's revision (see update). The
// identity columns are restored after fn, and an empty ActiveKey frees the
// key in the same write.
func (r jobRepo) Update(ctx context.Context, jobID string, fn func(*core.Job) error) (*core.Job, error) {
	what := "update job " + jobID
	return update(ctx, r.sc, what,
		func(st *state) (*core.Job, uint64, bool) {
			row, ok := st.jobs[jobID]
			return row.job, row.rev, ok
		},
		func(cur *core.Job) (*core.Job, error) {
			next := cur.Clone()
			if err := fn(next); err != nil {
				return nil, err
			}
			next.JobID, next.TemplateID, next.CreatedAt = cur.JobID, cur.TemplateID, cur.CreatedAt
			if err := checkJob(next); err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			return next, nil
		},
		func(st *state, cur, next *core.Job) error {
			if err := st.clash(next, jobID); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			next.UpdatedAt = r.sc.s.after(cur.UpdatedAt)
			row := st.jobs[jobID]
			st.jobs[jobID] = jobRow{job: next.Clone(), seq: row.seq, rev: st.nextRev()}
			return nil
		})
}

func (r jobRepo) DeleteByTemplate(ctx context.Context, templateID string) (int, error) {
	n := 0
	err := r.sc.write(ctx, func(st *state) error {
		for id, row := range st.jobs {
			if row.job.TemplateID == templateID {
				delete(st.jobs, id)
				n++
			}
		}
		return nil
	})
	return n, err
}
