package control

import (
	"context"
	"slices"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// JobQuery selects jobs for a listing (the console's builds view and a
// template's history).
type JobQuery struct {
	// TemplateID, when set, lists that template's jobs only.
	TemplateID string
	// Unfinished lists only jobs not yet READY or FAILED (PENDING,
	// RUNNING and BUILT: a BUILT job is still distributing).
	Unfinished bool
	// Limit caps the answer (<= 0: no cap).
	Limit int
}

// ListJobs returns the jobs q selects, the most recently updated first,
// with live pull counters on the active ones (as GetLiveJob).
func (s *Service) ListJobs(ctx context.Context, q JobQuery) ([]*core.Job, error) {
	var jobs []*core.Job
	var err error
	switch {
	case q.TemplateID != "":
		if err := core.ValidateTemplateID(q.TemplateID); err != nil {
			return nil, err
		}
		jobs, err = s.Store.Jobs().ListByTemplate(ctx, q.TemplateID)
	case q.Unfinished:
		jobs, err = s.Store.Jobs().ListStale(ctx, ports.StaleQuery{Statuses: []core.JobStatus{core.JobPending, core.JobRunning, core.JobBuilt},
			NewestFirst: true, Limit: q.Limit})
	default:
		// The store sorts and cuts: a listing reads the rows it shows,
		// not every job there is.
		jobs, err = s.Store.Jobs().ListStale(ctx, ports.StaleQuery{NewestFirst: true, Limit: q.Limit})
	}
	if err != nil {
		return nil, err
	}
	if q.Unfinished {
		jobs = slices.DeleteFunc(jobs, func(j *core.Job) bool { return j.Status.Terminal() })
	}
	if q.TemplateID != "" {
		// A template's jobs come by attempt; the newest attempt first
		// among jobs updated at the same instant.
		slices.Reverse(jobs)
		slices.SortStableFunc(jobs, func(a, b *core.Job) int { return b.UpdatedAt.Compare(a.UpdatedAt) })
	}
	if q.Limit > 0 && len(jobs) > q.Limit {
		jobs = jobs[:q.Limit]
	}
	if s.Progress != nil {
		for _, j := range jobs {
			if !j.Status.Active() {
				continue
			}
			if live, ok, err := s.Progress.Get(ctx, j.JobID); err == nil && ok && live.Pull.TotalBytes > 0 {
				j.Pull = live.Pull
			}
		}
	}
	return jobs, nil
}
