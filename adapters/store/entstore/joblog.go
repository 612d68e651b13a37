package entstore

import (
	"context"
	"fmt"
	"time"

	"github.com/cubesandbox/templatecenter/ent"
	"github.com/cubesandbox/templatecenter/ent/joblogline"
	"github.com/cubesandbox/templatecenter/ports"
)

// JobLog is the ports.JobLog of t_cube_template_job_log, on the store's
// database: every replica of both planes that shares the database reads
// the lines any of them wrote.
type JobLog struct{ s *Store }

var _ ports.JobLog = JobLog{}

// JobLog returns the store's job log.
func (s *Store) JobLog() JobLog { return JobLog{s: s} }

// Append implements ports.JobLog: the lines in one transaction, then each
// job named trimmed to its newest ports.MaxJobLogLines.
func (l JobLog) Append(ctx context.Context, lines []ports.JobLogLine) error {
	lines, err := ports.CheckJobLogLines(lines)
	if err != nil || len(lines) == 0 {
		return err
	}
	jobs := map[string]bool{}
	err = l.s.root().inTx(ctx, func(sc scope) error {
		builders := make([]*ent.JobLogLineCreate, len(lines))
		for i, ln := range lines {
			jobs[ln.JobID] = true
			builders[i] = sc.c.JobLogLine.Create().SetJobID(ln.JobID).SetLoggedAt(ln.Time).
				SetLevel(ln.Level).SetSource(ln.Source).SetMessage(ln.Message)
		}
		if err := sc.c.JobLogLine.CreateBulk(builders...).Exec(ctx); err != nil {
			return err
		}
		for job := range jobs {
			// The id of the newest line past the bound, if any: it and
			// every older line of the job go.
			ids, err := sc.c.JobLogLine.Query().Where(joblogline.JobID(job)).Order(ent.Desc(joblogline.FieldID)).
				Offset(ports.MaxJobLogLines).Limit(1).IDs(ctx)
			if err != nil {
				return err
			}
			if len(ids) == 1 {
				if _, err := sc.c.JobLogLine.Delete().Where(joblogline.JobID(job), joblogline.IDLTE(ids[0])).Exec(ctx); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return mapErr(err, fmt.Sprintf("append %d job log lines", len(lines)))
}

// Lines implements ports.JobLog.
func (l JobLog) Lines(ctx context.Context, jobID string, limit int) ([]ports.JobLogLine, error) {
	if limit <= 0 || limit > ports.MaxJobLogLines {
		limit = ports.MaxJobLogLines
	}
	var out []ports.JobLogLine
	err := l.s.root().do(ctx, func(c *ent.Client) error {
		es, err := c.JobLogLine.Query().Where(joblogline.JobID(jobID)).Order(ent.Desc(joblogline.FieldID)).Limit(limit).All(ctx)
		if err != nil {
			return err
		}
		out = make([]ports.JobLogLine, len(es))
		for i, e := range es {
			out[len(es)-1-i] = ports.JobLogLine{Seq: int64(e.ID), JobID: e.JobID, Time: e.LoggedAt.UTC(), Level: e.Level,
				Source: e.Source, Message: e.Message}
		}
		return nil
	})
	return out, mapErr(err, "job log of "+jobID)
}

// DeleteBefore implements ports.JobLog.
func (l JobLog) DeleteBefore(ctx context.Context, t time.Time) (int, error) {
	var n int
	err := l.s.root().do(ctx, func(c *ent.Client) error {
		var err error
		n, err = c.JobLogLine.Delete().Where(joblogline.LoggedAtLT(t.UTC())).Exec(ctx)
		return err
	})
	return n, mapErr(err, "delete old job log lines")
}
