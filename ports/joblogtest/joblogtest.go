package joblogtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Harness makes JobLogs for one adapter.
type Harness interface {
	// MakeJobLog returns a log. All logs of one harness share one backend.
	MakeJobLog(ctx context.Context) (ports.JobLog, error)
	// Close releases what the harness opened.
	Close()
}

// HarnessMaker returns a fresh Harness for one subtest.
type HarnessMaker func(ctx context.Context, t *testing.T) (Harness, error)

// RunConformanceTests runs the suite against the adapter newHarness builds.
func RunConformanceTests(t *testing.T, newHarness HarnessMaker) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*testing.T, context.Context, ports.JobLog, Harness)
	}{
		{"UnknownJobHasNoLines", testUnknown},
		{"RoundTrip", testRoundTrip},
		{"JobsAreIndependent", testIndependent},
		{"LimitKeepsTheNewest", testLimit},
		{"BoundedPerJob", testBounded},
		{"LongMessageCut", testCut},
		{"MissingJobIDRefused", testMissingJob},
		{"DeleteBefore", testDeleteBefore},
		{"ReplicasShareLines", testReplicas},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			h, err := newHarness(ctx, t)
			if err != nil {
				t.Fatalf("harness: %v", err)
			}
			defer h.Close()
			l, err := h.MakeJobLog(ctx)
			if err != nil {
				t.Fatalf("MakeJobLog: %v", err)
			}
			tt.fn(t, ctx, l, h)
		})
	}
}

// at is a fixed time in the past, whole seconds (every database keeps
// those).
var at = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func line(job string, n int) ports.JobLogLine {
	return ports.JobLogLine{JobID: job, Time: at.Add(time.Duration(n) * time.Second), Level: "INFO", Source: "cubemaster",
		Message: fmt.Sprintf("line %d", n)}
}

func lines(t *testing.T, ctx context.Context, l ports.JobLog, job string, limit int) []ports.JobLogLine {
	t.Helper()
	got, err := l.Lines(ctx, job, limit)
	if err != nil {
		t.Fatalf("Lines(%s, %d): %v", job, limit, err)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Seq <= got[i-1].Seq {
			t.Fatalf("lines not in Seq order: %d then %d", got[i-1].Seq, got[i].Seq)
		}
	}
	return got
}

func appendOK(t *testing.T, ctx context.Context, l ports.JobLog, ls ...ports.JobLogLine) {
	t.Helper()
	if err := l.Append(ctx, ls); err != nil {
		t.Fatalf("Append: %v", err)
	}
}

func messages(ls []ports.JobLogLine) string {
	var out []string
	for _, l := range ls {
		out = append(out, l.Message)
	}
	return strings.Join(out, "|")
}

func testUnknown(t *testing.T, ctx context.Context, l ports.JobLog, _ Harness) {
	if got := lines(t, ctx, l, "job-none", 0); len(got) != 0 {
		t.Fatalf("unknown job has %d lines", len(got))
	}
	if err := l.Append(ctx, nil); err != nil {
		t.Fatalf("Append(nil): %v", err)
	}
}

func testRoundTrip(t *testing.T, ctx context.Context, l ports.JobLog, _ Harness) {
	want := []ports.JobLogLine{
		line("job-a", 1),
		{JobID: "job-a", Time: at.Add(2 * time.Second), Level: "ERROR", Source: "templatecenter tc-1",
			Message: `job failed phase=PULLING err="<img src=x onerror=alert(1)> ünïcödé 'quotes'"`},
		line("job-a", 3),
	}
	appendOK(t, ctx, l, want...)
	got := lines(t, ctx, l, "job-a", 0)
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.JobID != w.JobID || g.Level != w.Level || g.Source != w.Source || g.Message != w.Message || !g.Time.Equal(w.Time) {
			t.Errorf("line %d = %+v, want %+v", i, g, w)
		}
		if g.Seq <= 0 {
			t.Errorf("line %d has Seq %d", i, g.Seq)
		}
	}
}

func testIndependent(t *testing.T, ctx context.Context, l ports.JobLog, _ Harness) {
	appendOK(t, ctx, l, line("job-a", 1), line("job-b", 2), line("job-a", 3))
	if got := messages(lines(t, ctx, l, "job-a", 0)); got != "line 1|line 3" {
		t.Errorf("job-a: %q", got)
	}
	if got := messages(lines(t, ctx, l, "job-b", 0)); got != "line 2" {
		t.Errorf("job-b: %q", got)
	}
}

func testLimit(t *testing.T, ctx context.Context, l ports.JobLog, _ Harness) {
	for i := 1; i <= 5; i++ {
		appendOK(t, ctx, l, line("job-a", i))
	}
	if got := messages(lines(t, ctx, l, "job-a", 2)); got != "line 4|line 5" {
		t.Errorf("limit 2: %q", got)
	}
	if got := lines(t, ctx, l, "job-a", ports.MaxJobLogLines+100); len(got) != 5 {
		t.Errorf("a limit above the bound: %d lines", len(got))
	}
}

func testBounded(t *testing.T, ctx context.Context, l ports.JobLog, _ Harness) {
	const extra = 7
	var batch []ports.JobLogLine
	for i := 0; i < ports.MaxJobLogLines; i++ {
		batch = append(batch, line("job-a", i))
	}
	appendOK(t, ctx, l, batch...)
	appendOK(t, ctx, l, line("job-b", 0))
	batch = batch[:0]
	for i := ports.MaxJobLogLines; i < ports.MaxJobLogLines+extra; i++ {
		batch = append(batch, line("job-a", i))
	}
	appendOK(t, ctx, l, batch...)
	got := lines(t, ctx, l, "job-a", 0)
	if len(got) != ports.MaxJobLogLines {
		t.Fatalf("job keeps %d lines, want %d", len(got), ports.MaxJobLogLines)
	}
	if got[0].Message != fmt.Sprintf("line %d", extra) || got[len(got)-1].Message != fmt.Sprintf("line %d", ports.MaxJobLogLines+extra-1) {
		t.Errorf("kept %q .. %q, want the newest", got[0].Message, got[len(got)-1].Message)
	}
	if got := lines(t, ctx, l, "job-b", 0); len(got) != 1 {
		t.Errorf("another job's lines were trimmed: %d", len(got))
	}
}

func testCut(t *testing.T, ctx context.Context, l ports.JobLog, _ Harness) {
	long := line("job-a", 1)
	long.Message = strings.Repeat("é", ports.MaxJobLogMessage) // two bytes each
	appendOK(t, ctx, l, long)
	got := lines(t, ctx, l, "job-a", 0)
	if len(got) != 1 {
		t.Fatalf("%d lines", len(got))
	}
	m := got[0].Message
	if len(m) > ports.MaxJobLogMessage || len(m) < ports.MaxJobLogMessage-8 || !utf8.ValidString(m) || !strings.HasPrefix(long.Message, m) {
		t.Errorf("cut message: %d bytes, valid UTF-8 %v", len(m), utf8.ValidString(m))
	}
}

func testMissingJob(t *testing.T, ctx context.Context, l ports.JobLog, _ Harness) {
	err := l.Append(ctx, []ports.JobLogLine{line("job-a", 1), {Time: at, Level: "INFO", Message: "no job"}})
	if !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("Append without a job id: %v, want core.ErrInvalidArgument", err)
	}
	if got := lines(t, ctx, l, "job-a", 0); len(got) != 0 {
		t.Errorf("a refused batch wrote %d lines", len(got))
	}
}

func testDeleteBefore(t *testing.T, ctx context.Context, l ports.JobLog, _ Harness) {
	appendOK(t, ctx, l, line("job-a", 1), line("job-a", 10), line("job-b", 2), line("job-b", 20))
	n, err := l.DeleteBefore(ctx, at.Add(5*time.Second))
	if err != nil {
		t.Fatalf("DeleteBefore: %v", err)
	}
	if n != 2 {
		t.Errorf("deleted %d, want 2", n)
	}
	if got := messages(lines(t, ctx, l, "job-a", 0)); got != "line 10" {
		t.Errorf("job-a after: %q", got)
	}
	if got := messages(lines(t, ctx, l, "job-b", 0)); got != "line 20" {
		t.Errorf("job-b after: %q", got)
	}
}

func testReplicas(t *testing.T, ctx context.Context, l ports.JobLog, h Harness) {
	other, err := h.MakeJobLog(ctx)
	if err != nil {
		t.Fatalf("MakeJobLog: %v", err)
	}
	appendOK(t, ctx, l, line("job-a", 1))
	appendOK(t, ctx, other, line("job-a", 2))
	for _, log := range []ports.JobLog{l, other} {
		if got := messages(lines(t, ctx, log, "job-a", 0)); got != "line 1|line 2" {
			t.Errorf("a replica reads %q", got)
		}
	}
}
