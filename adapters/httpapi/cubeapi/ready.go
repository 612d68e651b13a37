package cubeapi

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
)

// Check is one dependency /ready reports: Run returns a short detail
// ("2/2 nodes healthy") and an error when the dependency cannot serve.
// /ready is unauthenticated, so the detail must hold nothing private. The
// error is logged and never answered (it can name a database's address,
// user or driver); the answer says Failure instead.
type Check struct {
	Name string
	Run  func(ctx context.Context) (detail string, err error)
	// Failure is the answer's error when Run fails, in fixed words ("not
	// reachable"); empty is "not ready".
	Failure string
}

// ReadyResponse is the body of GET /ready.
type ReadyResponse struct {
	Status string                 `json:"status"` // ready or unavailable
	Checks map[string]CheckResult `json:"checks"`
}

// CheckResult is one dependency's state.
type CheckResult struct {
	Status string `json:"status"` // ok or failed
	Detail string `json:"detail,omitempty"`
	Error  string `json:"error,omitempty"`
}

// readyTimeout bounds each check, so /ready answers even when a
// dependency hangs.
const readyTimeout = 3 * time.Second

// ready is GET /ready: the data plane, the database and the nodes, each
// checked now (in parallel, bounded). 200 when all pass, else 503. Unlike
// /notify/health, which only says the process is up, it depends on them.
// A failed check is answered in its fixed words and its error logged.
func (s *server) ready(w http.ResponseWriter, r *http.Request) {
	resp := ReadyResponse{Status: "ready", Checks: map[string]CheckResult{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range s.cfg.Readiness {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
			defer cancel()
			detail, err := c.Run(ctx)
			res := CheckResult{Status: "ok", Detail: detail}
			if err != nil {
				s.log.WarnContext(r.Context(), "readiness check failed", "check", c.Name, "err", err)
				res.Status, res.Error = "failed", c.Failure
				if res.Error == "" {
					res.Error = "not ready"
				}
			}
			mu.Lock()
			resp.Checks[c.Name] = res
			if err != nil {
				resp.Status = "unavailable"
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	code := http.StatusOK
	if resp.Status != "ready" {
		code = http.StatusServiceUnavailable
	}
	wire.WriteJSON(w, code, resp)
}
