package wire

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// ReadyResponse is the body of both services' GET /ready: an overall
// status and each dependency's result, by name.
type ReadyResponse struct {
	Status string                 `json:"status"` // ready or unavailable
	Checks map[string]CheckResult `json:"checks"`
}

// Overall and per-check statuses of a ReadyResponse.
const (
	Ready       = "ready"
	Unavailable = "unavailable"
	CheckOK     = "ok"
	CheckFailed = "failed"
)

// CheckResult is one dependency's state.
type CheckResult struct {
	Status string `json:"status"` // ok or failed
	Detail string `json:"detail,omitempty"`
	Error  string `json:"error,omitempty"`
}

// ReadyCheck is one dependency /ready reports: Run returns a short detail
// ("2/2 nodes healthy") and an error when the dependency cannot serve.
// /ready is unauthenticated, so the detail must hold nothing private. The
// error is logged and never answered (it can name a database's address,
// user or driver); the answer says Failure instead.
type ReadyCheck struct {
	Name string
	Run  func(ctx context.Context) (detail string, err error)
	// Failure is the answer's error when Run fails, in fixed words ("not
	// reachable"); empty is "not ready".
	Failure string
}

// ReadyFailure is a check's error that brings its own answer, in fixed
// words, when one check can fail in ways the caller must tell apart.
type ReadyFailure struct {
	Answer string
	Err    error
}

func (e *ReadyFailure) Error() string { return e.Answer + ": " + e.Err.Error() }
func (e *ReadyFailure) Unwrap() error { return e.Err }

// ReadyTimeout bounds each check, so /ready answers even when a
// dependency hangs.
const ReadyTimeout = 3 * time.Second

// ServeReady runs the checks at once, each bounded by ReadyTimeout, and
// answers 200 when all pass, else 503, with a ReadyResponse. A failed
// check is answered in its fixed words and its error logged.
func ServeReady(w http.ResponseWriter, r *http.Request, log *slog.Logger, checks []ReadyCheck) {
	resp := ReadyResponse{Status: Ready, Checks: map[string]CheckResult{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range checks {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(r.Context(), ReadyTimeout)
			defer cancel()
			detail, err := c.Run(ctx)
			res := CheckResult{Status: CheckOK, Detail: detail}
			if err != nil {
				log.WarnContext(r.Context(), "readiness check failed", "check", c.Name, "path", r.URL.Path, "err", err)
				res.Status, res.Error = CheckFailed, c.Failure
				var answer *ReadyFailure
				if errors.As(err, &answer) {
					res.Error = answer.Answer
				}
				if res.Error == "" {
					res.Error = "not ready"
				}
			}
			mu.Lock()
			defer mu.Unlock()
			resp.Checks[c.Name] = res
			if err != nil {
				resp.Status = Unavailable
			}
		})
	}
	wg.Wait()
	code := http.StatusOK
	if resp.Status != Ready {
		code = http.StatusServiceUnavailable
	}
	WriteJSON(w, code, resp)
}
