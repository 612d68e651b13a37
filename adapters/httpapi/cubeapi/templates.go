package cubeapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/envelope"
	"github.com/cubesandbox/templatecenter/core"
)

var (
	errJobsOff       = errors.New("template image jobs are not configured on this master")
	errMigrationsOff = errors.New("template migration is not configured on this master")
	errCatalogOff    = errors.New("the template catalog is not configured on this master")
	errArtifactsOff  = errors.New("artifact reads are not configured on this master")
)

func required(field string) error { return &core.FieldError{Field: field, Reason: "is required"} }

type jobResponse struct {
	envelope.Response
	Job *jobInfo `json:"job,omitempty"`
}

// decode reads a JSON body; on failure it answers the envelope itself.
func (s *server) decode(w http.ResponseWriter, r *http.Request, dst any) bool {
	if err := envelope.Decode(w, r, s.cfg.MaxBodyBytes, dst); err != nil {
		envelope.WriteError(w, r, s.log, "", err)
		return false
	}
	return true
}

func (s *server) fail(w http.ResponseWriter, r *http.Request, requestID string, err error) {
	envelope.WriteError(w, r, s.log, requestID, err)
}

// baseURL is the download base URL recorded for artifacts this request
// builds: the configured one, else the request's own scheme and Host (as
// upstream; cubelet rewrites the host to its meta-server endpoint anyway).
func (s *server) baseURL(r *http.Request) string {
	if s.cfg.DownloadBaseURL != "" {
		return strings.TrimRight(s.cfg.DownloadBaseURL, "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// createFromImage is POST /cube/template/from-image.
func (s *server) createFromImage(w http.ResponseWriter, r *http.Request) {
	var req core.FromImageRequest
	if !s.decode(w, r, &req) {
		return
	}
	if req.RequestID == "" {
		s.fail(w, r, "", required("requestID"))
		return
	}
	if s.cfg.Jobs == nil {
		s.fail(w, r, req.RequestID, errJobsOff)
		return
	}
	v, err := s.cfg.Jobs.CreateFromImage(r.Context(), &req, s.baseURL(r))
	if err != nil {
		s.fail(w, r, req.RequestID, err)
		return
	}
	envelope.Write(w, jobResponse{Response: envelope.OK(req.RequestID), Job: newJobInfo(v)})
}

// getImageJob is GET /cube/template/from-image?job_id=J.
func (s *server) getImageJob(w http.ResponseWriter, r *http.Request) {
	jobID := r.URL.Query().Get("job_id")
	switch {
	case jobID == "":
		s.fail(w, r, "", required("job_id"))
	case s.cfg.Jobs == nil:
		s.fail(w, r, "", errJobsOff)
	default:
		v, err := s.cfg.Jobs.GetImageJob(r.Context(), jobID)
		if err != nil {
			s.fail(w, r, "", err)
			return
		}
		envelope.Write(w, jobResponse{Response: envelope.OK(""), Job: newJobInfo(v)})
	}
}

// redo is POST /cube/template/redo.
func (s *server) redo(w http.ResponseWriter, r *http.Request) {
	var req RedoRequest
	if !s.decode(w, r, &req) {
		return
	}
	switch {
	case req.RequestID == "":
		s.fail(w, r, "", required("requestID"))
	case req.TemplateID == "":
		s.fail(w, r, req.RequestID, core.ErrTemplateIDRequired)
	case s.cfg.Jobs == nil:
		s.fail(w, r, req.RequestID, errJobsOff)
	default:
		v, err := s.cfg.Jobs.Redo(r.Context(), req, s.baseURL(r))
		if err != nil {
			s.fail(w, r, req.RequestID, err)
			return
		}
		envelope.Write(w, jobResponse{Response: envelope.OK(req.RequestID), Job: newJobInfo(v)})
	}
}

// migrate is POST /cube/template/migrate.
func (s *server) migrate(w http.ResponseWriter, r *http.Request) {
	var req MigrateRequest
	if !s.decode(w, r, &req) {
		return
	}
	switch {
	case req.TemplateID == "":
		s.fail(w, r, req.RequestID, core.ErrTemplateIDRequired)
	case s.cfg.Migrations == nil:
		s.fail(w, r, req.RequestID, errMigrationsOff)
	default:
		v, err := s.cfg.Migrations.Migrate(r.Context(), req)
		if err != nil {
			s.fail(w, r, req.RequestID, err)
			return
		}
		envelope.Write(w, jobResponse{Response: envelope.OK(req.RequestID), Job: newJobInfo(v)})
	}
}

// getMigrateJob is GET /cube/template/migrate?job_id=J.
func (s *server) getMigrateJob(w http.ResponseWriter, r *http.Request) {
	jobID := r.URL.Query().Get("job_id")
	switch {
	case jobID == "":
		s.fail(w, r, "", required("job_id"))
	case s.cfg.Migrations == nil:
		s.fail(w, r, "", errMigrationsOff)
	default:
		v, err := s.cfg.Migrations.GetMigrateJob(r.Context(), jobID)
		if err != nil {
			s.fail(w, r, "", err)
			return
		}
		envelope.Write(w, jobResponse{Response: envelope.OK(""), Job: newJobInfo(v)})
	}
}

type listResponse struct {
	envelope.Response
	Data []templateItem `json:"data"`
}

type templateResponse struct {
	envelope.Response
	templateItem
	Replicas      []replicaInfo `json:"replicas"`
	CreateRequest any           `json:"create_request,omitempty"`
}

// createTemplate is POST /cube/template: a sandbox create request whose
// template id annotation names the template. It answers after every
// target node has snapshotted it (upstream createTemplate).
func (s *server) createTemplate(w http.ResponseWriter, r *http.Request) {
	var body json.RawMessage
	if !s.decode(w, r, &body) {
		return
	}
	var head struct {
		RequestID string `json:"requestID"`
	}
	_ = json.Unmarshal(body, &head) // a non-object body is refused by the service
	if s.cfg.Catalog == nil {
		s.fail(w, r, head.RequestID, errCatalogOff)
		return
	}
	d, err := s.cfg.Catalog.CreateTemplate(r.Context(), body)
	if err != nil {
		s.fail(w, r, head.RequestID, err)
		return
	}
	envelope.Write(w, templateResponse{Response: envelope.OK(head.RequestID), templateItem: newTemplateItem(d.TemplateSummary),
		Replicas: newReplicaInfos(d.Replicas)})
}

// getTemplates is GET /cube/template: the list, or one template with
// ?template_id=X[&include_request=true|1].
func (s *server) getTemplates(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Catalog == nil {
		s.fail(w, r, "", errCatalogOff)
		return
	}
	q := r.URL.Query()
	id := q.Get("template_id")
	if id == "" {
		list, err := s.cfg.Catalog.ListTemplates(r.Context())
		if err != nil {
			s.fail(w, r, "", err)
			return
		}
		items := make([]templateItem, 0, len(list))
		for _, t := range list {
			items = append(items, newTemplateItem(t))
		}
		envelope.Write(w, listResponse{Response: envelope.OK(""), Data: items})
		return
	}
	inc := q.Get("include_request")
	d, err := s.cfg.Catalog.GetTemplate(r.Context(), id, inc == "true" || inc == "1")
	if err != nil {
		s.fail(w, r, "", err)
		return
	}
	envelope.Write(w, templateResponse{Response: envelope.OK(""), templateItem: newTemplateItem(d.TemplateSummary),
		Replicas: newReplicaInfos(d.Replicas), CreateRequest: rawOrString(d.CreateRequest)})
}

type resolveResponse struct {
	envelope.Response
	TemplateID    string `json:"template_id"`
	Alias         string `json:"alias,omitempty"`
	Status        string `json:"status,omitempty"`
	CreateRequest any    `json:"create_request,omitempty"`
}

// resolveTemplate is GET /cube/template/resolve?template=<id-or-alias>: the
// template a sandbox create naming it would use. It is a read of this
// master's own store, so it is never forwarded.
func (s *server) resolveTemplate(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimSpace(r.URL.Query().Get("template"))
	switch {
	case key == "":
		s.fail(w, r, "", required("template"))
	case s.cfg.Catalog == nil:
		s.fail(w, r, "", errCatalogOff)
	default:
		t, err := s.cfg.Catalog.ResolveTemplate(r.Context(), key)
		if err != nil {
			s.fail(w, r, "", err)
			return
		}
		envelope.Write(w, resolveResponse{Response: envelope.OK(""), TemplateID: t.TemplateID, Alias: t.Alias,
			Status: t.Status, CreateRequest: rawOrString(t.CreateRequest)})
	}
}

type deleteResponse struct {
	envelope.Response
	TemplateID string `json:"template_id"`
}

// deleteTemplate is DELETE /cube/template.
func (s *server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	var req DeleteRequest
	if !s.decode(w, r, &req) {
		return
	}
	switch {
	case req.TemplateID == "":
		s.fail(w, r, req.RequestID, core.ErrTemplateIDRequired)
	case s.cfg.Catalog == nil:
		s.fail(w, r, req.RequestID, errCatalogOff)
	default:
		if err := s.cfg.Catalog.DeleteTemplate(r.Context(), req); err != nil {
			s.fail(w, r, req.RequestID, err)
			return
		}
		envelope.Write(w, deleteResponse{Response: envelope.OK(req.RequestID), TemplateID: req.TemplateID})
	}
}

type aliasResponse struct {
	envelope.Response
	TemplateID string `json:"template_id"`
	Alias      string `json:"alias"`
}

// setAlias is PUT /cube/template/{template_id}/alias with {"alias": ...};
// an absent, null or empty alias clears it (seed §3.1). An empty body is
// also a clear.
func (s *server) setAlias(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "template_id")
	var req struct {
		RequestID string  `json:"requestID"`
		Alias     *string `json:"alias"`
	}
	if r.ContentLength != 0 && !s.decode(w, r, &req) {
		return
	}
	alias := ""
	if req.Alias != nil {
		alias = strings.TrimSpace(*req.Alias)
	}
	if s.cfg.Catalog == nil {
		s.fail(w, r, req.RequestID, errCatalogOff)
		return
	}
	if err := s.cfg.Catalog.SetAlias(r.Context(), id, alias); err != nil {
		s.fail(w, r, req.RequestID, err)
		return
	}
	envelope.Write(w, aliasResponse{Response: envelope.OK(req.RequestID), TemplateID: id, Alias: alias})
}

type buildStatusResponse struct {
	envelope.Response
	BuildID      string `json:"build_id"`
	TemplateID   string `json:"template_id"`
	AttemptNo    int    `json:"attempt_no"`
	RetryOfJobID string `json:"retry_of_job_id,omitempty"`
	Status       string `json:"status"`
	Progress     int    `json:"progress"`
	Message      string `json:"message"`
}

// buildStatus is GET /cube/template/build/{build_id}/status.
func (s *server) buildStatus(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "build_id")
	if s.cfg.Jobs == nil {
		s.fail(w, r, "", errJobsOff)
		return
	}
	j, err := s.cfg.Jobs.BuildStatus(r.Context(), id)
	if err != nil {
		s.fail(w, r, "", err)
		return
	}
	msg := j.ErrorMessage
	if msg == "" {
		msg = string(j.Phase)
	}
	envelope.Write(w, buildStatusResponse{Response: envelope.OK(""), BuildID: id, TemplateID: j.TemplateID,
		AttemptNo: j.AttemptNo, RetryOfJobID: j.RetryOfJobID, Status: buildState(j.Status), Progress: j.Progress, Message: msg})
}

type rootfsResponse struct {
	envelope.Response
	Job struct {
		ArtifactID     string        `json:"artifact_id"`
		ArtifactStatus string        `json:"artifact_status"`
		Artifact       *artifactInfo `json:"artifact"`
	} `json:"job"`
}

// rootfsArtifact is GET /cube/rootfs-artifact?artifact_id=A.
func (s *server) rootfsArtifact(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("artifact_id")
	switch {
	case id == "":
		s.fail(w, r, "", required("artifact_id"))
	case s.cfg.Artifacts == nil:
		s.fail(w, r, "", errArtifactsOff)
	default:
		a, err := s.cfg.Artifacts.GetArtifact(r.Context(), id)
		if err != nil {
			s.fail(w, r, "", err)
			return
		}
		resp := rootfsResponse{Response: envelope.OK("")}
		resp.Job.ArtifactID, resp.Job.ArtifactStatus, resp.Job.Artifact = a.ArtifactID, string(a.Status), newArtifactInfo(a)
		envelope.Write(w, resp)
	}
}
