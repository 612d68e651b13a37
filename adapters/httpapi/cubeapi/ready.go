package cubeapi

import (
	"net/http"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
)

// Check is one dependency /ready reports (see wire.ReadyCheck).
type Check = wire.ReadyCheck

// ReadyResponse is the body of GET /ready, the same document the data
// plane answers.
type ReadyResponse = wire.ReadyResponse

// ready is GET /ready: the data plane, the database and the nodes, each
// checked now (in parallel, bounded). 200 when all pass, else 503. Unlike
// /notify/health, which only says the process is up, it depends on them.
func (s *server) ready(w http.ResponseWriter, r *http.Request) {
	wire.ServeReady(w, r, s.log, s.cfg.Readiness)
}
