package startup

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/joblog"
	"github.com/cubesandbox/templatecenter/ports"
)

// JobLogRetention is how long the lines the services log about a job are
// kept (the master deletes older ones every JobLogPruneEvery); a job also
// keeps at most ports.MaxJobLogLines lines.
const (
	JobLogRetention  = 14 * 24 * time.Hour
	JobLogPruneEvery = time.Hour
)

// lazyJobLog opens its log on first use, so a logger can be wrapped before
// the store is opened (the recorder writes from its own goroutine).
type lazyJobLog struct {
	open func() (ports.JobLog, error)
	once sync.Once
	l    ports.JobLog
	err  error
}

func (z *lazyJobLog) get() (ports.JobLog, error) {
	z.once.Do(func() { z.l, z.err = z.open() })
	return z.l, z.err
}

func (z *lazyJobLog) Append(ctx context.Context, lines []ports.JobLogLine) error {
	l, err := z.get()
	if err != nil {
		return err
	}
	return l.Append(ctx, lines)
}

func (z *lazyJobLog) Lines(ctx context.Context, jobID string, limit int) ([]ports.JobLogLine, error) {
	l, err := z.get()
	if err != nil {
		return nil, err
	}
	return l.Lines(ctx, jobID, limit)
}

func (z *lazyJobLog) DeleteBefore(ctx context.Context, t time.Time) (int, error) {
	l, err := z.get()
	if err != nil {
		return 0, err
	}
	return l.DeleteBefore(ctx, t)
}

// JobLogRecorder starts a recorder of the job lines log's records carry,
// written to the log open returns (called once, on the first write), and
// returns it with log wrapped. A write that fails is reported on log
// itself (at DEBUG: the process's own log still has the lines). Close the
// recorder before the store.
func JobLogRecorder(log *slog.Logger, source string, open func() (ports.JobLog, error)) (*joblog.Recorder, *slog.Logger) {
	rec := joblog.NewRecorder(&lazyJobLog{open: open}, source, func(err error) {
		log.Debug("job log lines not written", "err", err)
	})
	return rec, rec.Logger(log)
}

// PruneJobLog deletes job log lines older than JobLogRetention now and
// every JobLogPruneEvery until ctx ends. Several masters pruning at once
// is harmless.
func PruneJobLog(ctx context.Context, l ports.JobLog, log *slog.Logger) {
	t := time.NewTicker(JobLogPruneEvery)
	defer t.Stop()
	for {
		if n, err := l.DeleteBefore(ctx, time.Now().Add(-JobLogRetention)); err != nil && ctx.Err() == nil {
			log.Warn("old job log lines not deleted", "err", err)
		} else if n > 0 {
			log.Info("old job log lines deleted", "lines", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
