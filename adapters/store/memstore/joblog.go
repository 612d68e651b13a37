package memstore

import (
	"context"
	"sync"
	"time"

	"github.com/cubesandbox/templatecenter/ports"
)

// JobLog is an in-memory ports.JobLog: what one process logged about its
// jobs, gone when it exits. Share one value to stand for replicas.
type JobLog struct {
	mu   sync.Mutex
	seq  int64
	jobs map[string][]ports.JobLogLine
}

var _ ports.JobLog = (*JobLog)(nil)

// NewJobLog returns an empty log.
func NewJobLog() *JobLog { return &JobLog{jobs: map[string][]ports.JobLogLine{}} }

// Append implements ports.JobLog.
func (j *JobLog) Append(ctx context.Context, lines []ports.JobLogLine) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	lines, err := ports.CheckJobLogLines(lines)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, l := range lines {
		j.seq++
		l.Seq = j.seq
		kept := append(j.jobs[l.JobID], l)
		if n := len(kept) - ports.MaxJobLogLines; n > 0 {
			kept = append([]ports.JobLogLine(nil), kept[n:]...)
		}
		j.jobs[l.JobID] = kept
	}
	return nil
}

// Lines implements ports.JobLog.
func (j *JobLog) Lines(ctx context.Context, jobID string, limit int) ([]ports.JobLogLine, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > ports.MaxJobLogLines {
		limit = ports.MaxJobLogLines
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	all := j.jobs[jobID]
	if len(all) > limit {
		all = all[len(all)-limit:]
	}
	return append([]ports.JobLogLine(nil), all...), nil
}

// DeleteBefore implements ports.JobLog.
func (j *JobLog) DeleteBefore(ctx context.Context, t time.Time) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	n := 0
	for id, ls := range j.jobs {
		var kept []ports.JobLogLine
		for _, l := range ls {
			if l.Time.Before(t) {
				n++
			} else {
				kept = append(kept, l)
			}
		}
		if len(kept) == 0 {
			delete(j.jobs, id)
		} else {
			j.jobs[id] = kept
		}
	}
	return n, nil
}
