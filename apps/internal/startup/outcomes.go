package startup

import (
	"context"
	"strings"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/metrics"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// CountJobOutcomes wraps st so that every job update that moves a job to a
// terminal status is counted in m's jobs_finished_total, once it is
// written (inside a transaction: once the transaction commits). Counting
// at the store catches every path that finishes a job (the resume, a
// failed dispatch, delete, the sweeper, the reconciler) without each
// having to remember.
func CountJobOutcomes(st ports.Store, m *metrics.Metrics) ports.Store {
	if m == nil {
		return st
	}
	return outcomeStore{Store: st, m: m}
}

type outcomeStore struct {
	ports.Store
	m *metrics.Metrics
}

func (s outcomeStore) Jobs() ports.JobRepository {
	return outcomeJobs{JobRepository: s.Store.Jobs(), count: func(j *core.Job) { countJob(s.m, j) }}
}

func (s outcomeStore) Tx(ctx context.Context, fn func(ctx context.Context, r ports.Repos) error) error {
	var finished []*core.Job
	err := s.Store.Tx(ctx, func(ctx context.Context, r ports.Repos) error {
		finished = finished[:0] // a retried transaction starts over
		return fn(ctx, outcomeRepos{Repos: r, count: func(j *core.Job) { finished = append(finished, j) }})
	})
	if err == nil {
		for _, j := range finished {
			countJob(s.m, j)
		}
	}
	return err
}

type outcomeRepos struct {
	ports.Repos
	count func(*core.Job)
}

func (r outcomeRepos) Jobs() ports.JobRepository {
	return outcomeJobs{JobRepository: r.Repos.Jobs(), count: r.count}
}

type outcomeJobs struct {
	ports.JobRepository
	count func(*core.Job)
}

func (j outcomeJobs) Update(ctx context.Context, jobID string, fn func(*core.Job) error) (*core.Job, error) {
	var was core.JobStatus
	out, err := j.JobRepository.Update(ctx, jobID, func(job *core.Job) error {
		was = job.Status // the last read wins: Update may call fn again
		return fn(job)
	})
	if err == nil && !was.Terminal() && out.Status.Terminal() {
		j.count(out)
	}
	return out, err
}

// countJob counts a terminal job: ready, partially_ready (a READY job
// whose template is on some of its nodes only) or failed.
func countJob(m *metrics.Metrics, j *core.Job) {
	result := strings.ToLower(string(j.Status))
	if j.Status == core.JobReady && j.TemplateStatus == string(core.TemplatePartiallyReady) {
		result = "partially_ready"
	}
	m.JobFinished(string(j.Operation), result)
}
