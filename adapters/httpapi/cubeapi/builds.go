package cubeapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/cubeview"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/envelope"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
)

// The console's read routes: jobs across templates, a job's log lines and
// the nodes. Behind the public API's credentials like every /cube/ route.
const (
	PathJobs   = "/cube/template/jobs"
	PathJobLog = "/cube/template/jobs/log"
	PathNodes  = "/cube/node"
)

var (
	errJobListOff = errors.New("job listing is not configured on this master")
	errJobLogOff  = errors.New("the job log is not configured on this master")
	errNodesOff   = errors.New("the node view is not configured on this master")
)

// jobLister lists jobs (*control.Service).
type jobLister interface {
	ListJobs(ctx context.Context, q control.JobQuery) ([]*core.Job, error)
}

type buildListResponse struct {
	envelope.Response
	cubeview.BuildList
}

type jobLogResponse struct {
	envelope.Response
	cubeview.JobLog
}

type nodeListResponse struct {
	envelope.Response
	cubeview.NodeList
}

// maxJobList caps a job listing.
const maxJobList = 1000

// limitParam reads ?limit= (1 to max; def when absent).
func limitParam(r *http.Request, def, max int) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		return 0, &core.FieldError{Field: "limit", Reason: "must be a whole number from 1 to " + strconv.Itoa(max)}
	}
	return n, nil
}

// listJobs is GET /cube/template/jobs[?template_id=][&unfinished=1][&limit=]:
// jobs, the most recently updated first.
func (s *server) listJobs(w http.ResponseWriter, r *http.Request) {
	jl, ok := s.cfg.Jobs.(jobLister)
	if !ok {
		s.fail(w, r, "", errJobListOff)
		return
	}
	limit, err := limitParam(r, 100, maxJobList)
	if err != nil {
		s.fail(w, r, "", err)
		return
	}
	q := r.URL.Query()
	query := control.JobQuery{Limit: limit}
	switch v := q.Get("unfinished"); v {
	case "", "0", "false":
	case "1", "true":
		query.Unfinished = true
	default:
		s.fail(w, r, "", &core.FieldError{Field: "unfinished", Reason: "must be true, 1, false or 0"})
		return
	}
	if tid := q.Get("template_id"); tid != "" {
		id, ok := s.templateKey(w, r, "", tid)
		if !ok {
			return
		}
		query.TemplateID = id
	}
	jobs, err := jl.ListJobs(r.Context(), query)
	if err != nil {
		s.fail(w, r, "", err)
		return
	}
	out := cubeview.BuildList{Data: make([]cubeview.BuildItem, 0, len(jobs))}
	for _, j := range jobs {
		it := cubeview.NewBuildItem(j)
		if jn, ok := s.cfg.Jobs.(jobNodes); ok && query.Unfinished {
			// Each running job's nodes, for the live distribution view;
			// display data, so a failed read leaves them out.
			if rs, nerr := jn.JobNodes(r.Context(), j); nerr == nil && len(rs) > 0 {
				it.Nodes = cubeview.NewJobNodes(rs)
			}
		}
		out.Data = append(out.Data, it)
	}
	s.write(w, r, buildListResponse{Response: envelope.OK(""), BuildList: out})
}

// jobLog is GET /cube/template/jobs/log?job_id=[&limit=]: the lines the
// services logged about the job, oldest first.
func (s *server) jobLog(w http.ResponseWriter, r *http.Request) {
	jobID := r.URL.Query().Get("job_id")
	if jobID == "" {
		s.fail(w, r, "", required("job_id"))
		return
	}
	if s.cfg.JobLog == nil {
		s.fail(w, r, "", errJobLogOff)
		return
	}
	limit, err := limitParam(r, 0, maxJobList)
	if err != nil {
		s.fail(w, r, "", err)
		return
	}
	lines, err := s.cfg.JobLog.Lines(r.Context(), jobID, limit)
	if err != nil {
		s.fail(w, r, "", err)
		return
	}
	s.write(w, r, jobLogResponse{Response: envelope.OK(""), JobLog: cubeview.NewJobLog(jobID, lines)})
}

// listNodes is GET /cube/node: every node with its health and what it
// holds.
func (s *server) listNodes(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Nodes == nil {
		s.fail(w, r, "", errNodesOff)
		return
	}
	nodes, err := s.cfg.Nodes(r.Context())
	if err != nil {
		s.fail(w, r, "", err)
		return
	}
	if nodes == nil {
		nodes = []cubeview.NodeInfo{}
	}
	s.write(w, r, nodeListResponse{Response: envelope.OK(""), NodeList: cubeview.NodeList{Data: nodes}})
}
