package masterclient_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/cubeapi"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/masterclient"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/statusreportertest"
)

// TestConformance runs the StatusReporter suite against the real cubemaster
// router's callback route, with a scripted StatusReports behind it.
func TestConformance(t *testing.T) {
	statusreportertest.RunConformanceTests(t, newHarness)
}

const (
	callbackToken = "master-conformance-callback-token"
	wrongToken    = "master-conformance-wrong-token"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type harness struct {
	srv      *httptest.Server
	reports  *scriptedReports
	attempts atomic.Int64
}

func newHarness(_ context.Context, _ *testing.T) (statusreportertest.Harness, error) {
	h := &harness{reports: &scriptedReports{closed: make(chan struct{})}}
	router, err := cubeapi.New(cubeapi.Config{Token: callbackToken, Reports: h.reports, Logger: quietLogger()})
	if err != nil {
		return nil, err
	}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.attempts.Add(1)
		router.ServeHTTP(w, r)
	}))
	return h, nil
}

func (h *harness) reporter(token string) (ports.StatusReporter, error) {
	return masterclient.New(masterclient.Config{
		BaseURL: h.srv.URL,
		Token:   token,
		Logger:  quietLogger(),
		// The real schedule, a hundred times faster: retries stay real
		// waits that a cancel can interrupt.
		Sleep: func(ctx context.Context, d time.Duration) error {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(d / 100):
				return nil
			}
		},
	})
}

func (h *harness) MakeReporter(context.Context) (ports.StatusReporter, error) {
	return h.reporter(callbackToken)
}

func (h *harness) MakeReporterWithWrongToken(context.Context) (ports.StatusReporter, error) {
	return h.reporter(wrongToken)
}

func (h *harness) Script(answers ...statusreportertest.Answer) { h.reports.script(answers) }
func (h *harness) Delivered() []statusreportertest.Delivery    { return h.reports.delivered() }
func (h *harness) Attempts() int                               { return int(h.attempts.Load()) }
func (h *harness) Held() int                                   { return int(h.reports.held.Load()) }
func (h *harness) Secrets() []string                           { return []string{callbackToken, wrongToken} }

func (h *harness) Close() {
	h.reports.closeOnce.Do(func() { close(h.reports.closed) })
	h.srv.Close()
}

// scriptedReports is cubeapi.StatusReports answering from a script, with
// the errors the master's real service returns for each case.
type scriptedReports struct {
	mu        sync.Mutex
	answers   []statusreportertest.Answer
	got       []statusreportertest.Delivery
	held      atomic.Int64
	closed    chan struct{}
	closeOnce sync.Once
}

func (s *scriptedReports) script(a []statusreportertest.Answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answers = append([]statusreportertest.Answer(nil), a...)
}

func (s *scriptedReports) delivered() []statusreportertest.Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]statusreportertest.Delivery(nil), s.got...)
}

func (s *scriptedReports) HandleStatusReport(ctx context.Context, jobID string, r ports.StatusReport) (bool, error) {
	s.mu.Lock()
	answer := statusreportertest.Accept
	if len(s.answers) > 0 {
		answer, s.answers = s.answers[0], s.answers[1:]
	}
	if answer == statusreportertest.Accept || answer == statusreportertest.AcknowledgeStale {
		s.got = append(s.got, statusreportertest.Delivery{JobID: jobID, Report: r})
	}
	s.mu.Unlock()

	switch answer {
	case statusreportertest.Accept:
		return true, nil
	case statusreportertest.AcknowledgeStale:
		return false, fmt.Errorf("job %s: %w", jobID, core.ErrStaleUpdate)
	case statusreportertest.FailTransient:
		return false, errors.New("database connection lost")
	case statusreportertest.RefuseUnknownJob:
		return false, fmt.Errorf("job %s: %w", jobID, core.ErrNotFound)
	case statusreportertest.RefuseTransition:
		return false, fmt.Errorf("job %s: PENDING -> READY: %w", jobID, core.ErrInvalidTransition)
	case statusreportertest.Hold:
		s.held.Add(1)
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-s.closed:
			return false, errors.New("harness closed")
		}
	}
	return false, fmt.Errorf("unknown scripted answer %d", answer)
}
