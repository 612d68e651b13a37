package ports

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cubesandbox/templatecenter/core"
)

// JobLogLine is one line a service logged about a job (a log record
// carrying the job's id), kept so that an operator can read a build's
// story after the fact, from any master replica and after a restart.
type JobLogLine struct {
	// Seq is set by the log: it grows with every line appended to the
	// log (across jobs), so it orders a job's lines. Ignored by Append.
	Seq   int64
	JobID string
	// Time is when the service logged the line (its own clock).
	Time time.Time
	// Level is slog's level name: DEBUG, INFO, WARN or ERROR.
	Level string
	// Source names the service and replica that logged it
	// ("cubemaster", "templatecenter", with its instance when known).
	Source string
	// Message is the record's message followed by its attributes as
	// key=value text, cut to MaxJobLogMessage bytes.
	Message string
}

// MaxJobLogLines bounds how many lines a job keeps: appending more drops
// the job's oldest ones. MaxJobLogMessage bounds one line's message.
const (
	MaxJobLogLines   = 500
	MaxJobLogMessage = 2048
)

// JobLog keeps the lines the services log about each job. It is shared by
// every replica of both planes (a database table), written in batches off
// the logging path, and bounded: MaxJobLogLines per job, and lines older
// than the operator's retention are dropped with DeleteBefore.
type JobLog interface {
	// Append stores lines, each naming its job. A line without a job id
	// wraps core.ErrInvalidArgument and nothing is written; messages longer
	// than MaxJobLogMessage are cut. Afterwards each job named keeps at
	// most MaxJobLogLines lines, its newest.
	Append(ctx context.Context, lines []JobLogLine) error
	// Lines returns the job's newest lines, at most limit of them (limit <=
	// 0 or above MaxJobLogLines: MaxJobLogLines), oldest first (by Seq). A
	// job without lines gives none and no error.
	Lines(ctx context.Context, jobID string, limit int) ([]JobLogLine, error)
	// DeleteBefore removes every line whose Time is before t and returns how
	// many.
	DeleteBefore(ctx context.Context, t time.Time) (int, error)
}

// CheckJobLogLines refuses a batch with a line that names no job and
// returns the lines with their messages cut to MaxJobLogMessage on a
// character boundary (the checks every JobLog adapter makes).
func CheckJobLogLines(lines []JobLogLine) ([]JobLogLine, error) {
	out := make([]JobLogLine, len(lines))
	for i, l := range lines {
		if strings.TrimSpace(l.JobID) == "" {
			return nil, fmt.Errorf("job log line %d: %w", i, &core.FieldError{Field: "job_id", Reason: "is required"})
		}
		l.Message = strings.ToValidUTF8(l.Message, "\uFFFD")
		if len(l.Message) > MaxJobLogMessage {
			cut := MaxJobLogMessage
			for cut > 0 && !utf8.RuneStart(l.Message[cut]) {
				cut--
			}
			l.Message = l.Message[:cut]
		}
		l.Time = l.Time.UTC()
		out[i] = l
	}
	return out, nil
}
