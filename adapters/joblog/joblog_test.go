package joblog_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/joblog"
	"github.com/cubesandbox/templatecenter/adapters/store/memstore"
	"github.com/cubesandbox/templatecenter/ports"
)

func TestRecorder(t *testing.T) {
	store := memstore.NewJobLog()
	r := joblog.NewRecorder(store, "cubemaster", nil)
	defer r.Close()
	var out bytes.Buffer
	log := r.Logger(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn})))

	log.Info("job failed", "job", "job-1", "phase", "PULLING", "err", errors.New("no such tag"))
	log.With("job_id", "job-2").Warn("retrying", "attempt", 2)
	log.Debug("too chatty", "job", "job-1")
	log.Info("no job here", "template", "t")
	log.WithGroup("g").Info("grouped", "job", "job-3", "k", "v")
	log.Info("nested", slog.Group("req", "job", "not-a-job-key"), "job_id", "job-1")
	r.Flush()

	tests := []struct {
		job  string
		want []string // messages
	}{
		{"job-1", []string{`job failed job=job-1 phase=PULLING err="no such tag"`, `nested req.job=not-a-job-key job_id=job-1`}},
		{"job-2", []string{`retrying job_id=job-2 attempt=2`}},
		{"job-3", nil}, // a key inside a group names no job
		{"not-a-job-key", nil},
	}
	for _, tt := range tests {
		got, err := store.Lines(context.Background(), tt.job, 0)
		if err != nil {
			t.Fatal(err)
		}
		var msgs []string
		for _, l := range got {
			msgs = append(msgs, l.Message)
			if l.Source != "cubemaster" || l.Time.IsZero() || l.JobID != tt.job {
				t.Errorf("line %+v", l)
			}
		}
		if strings.Join(msgs, "\n") != strings.Join(tt.want, "\n") {
			t.Errorf("%s: %q, want %q", tt.job, msgs, tt.want)
		}
	}
	if got, _ := store.Lines(context.Background(), "job-2", 0); len(got) == 1 && got[0].Level != "WARN" {
		t.Errorf("level %q", got[0].Level)
	}
	// The process's own log keeps its level: only the WARN line.
	if s := out.String(); strings.Count(s, "\n") != 1 || !strings.Contains(s, "retrying") {
		t.Errorf("own log:\n%s", s)
	}
}

// failing is a job log that refuses every write.
type failing struct{ ports.JobLog }

func (failing) Append(context.Context, []ports.JobLogLine) error { return errors.New("database down") }

func TestRecorderFailureDropsLinesNotTheLog(t *testing.T) {
	var heard []error
	r := joblog.NewRecorder(failing{}, "templatecenter", func(err error) { heard = append(heard, err) })
	var out bytes.Buffer
	log := r.Logger(slog.New(slog.NewTextHandler(&out, nil)))
	log.Info("built", "job_id", "job-1")
	r.Flush()
	r.Close()
	if r.Dropped() != 1 || len(heard) != 1 || !strings.Contains(heard[0].Error(), "database down") {
		t.Errorf("dropped %d, heard %v", r.Dropped(), heard)
	}
	if !strings.Contains(out.String(), "built") {
		t.Errorf("own log lost the line: %q", out.String())
	}
	log.Info("after close", "job_id", "job-1") // dropped, no panic, no wait
}
