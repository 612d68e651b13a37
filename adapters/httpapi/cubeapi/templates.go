package cubeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/cubeview"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/envelope"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/metrics"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
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
	cubeview.JobResponse
}

// jobAnswer writes job (with its artifact row, if it has one) or the error.
func (s *server) jobAnswer(w http.ResponseWriter, r *http.Request, requestID string, job *core.Job, err error) {
	if err != nil {
		s.fail(w, r, requestID, err)
		return
	}
	var art *core.Artifact
	if job.ArtifactID != "" && s.cfg.Artifacts != nil {
		a, aerr := s.cfg.Artifacts.GetArtifact(r.Context(), job.ArtifactID)
		switch {
		case aerr == nil:
			art = a
		case !errors.Is(aerr, core.ErrNotFound):
			s.fail(w, r, requestID, aerr)
			return
		}
	}
	info := cubeview.NewJobInfo(job, art)
	if jn, ok := s.cfg.Jobs.(jobNodes); ok {
		// Display data: a failed read leaves the nodes out.
		if rs, nerr := jn.JobNodes(r.Context(), job); nerr == nil && len(rs) > 0 {
			info.Nodes = cubeview.NewJobNodes(rs)
		}
	}
	s.write(w, r, jobResponse{Response: envelope.OK(requestID), JobResponse: cubeview.JobResponse{Job: info}})
}

// jobNodes is implemented by job services that can list a job's target
// nodes with the state of their copies (*control.Service).
type jobNodes interface {
	JobNodes(ctx context.Context, job *core.Job) ([]*core.Replica, error)
}

// decode reads a JSON body; on failure it answers the envelope itself.
func (s *server) decode(w http.ResponseWriter, r *http.Request, dst any) bool {
	if err := checkContentType(r); err != nil {
		s.fail(w, r, "", err)
		return false
	}
	if err := envelope.Decode(w, r, s.cfg.MaxBodyBytes, dst); err != nil {
		s.fail(w, r, "", err)
		return false
	}
	return true
}

// formContentTypes are the body types a web page may send to another
// origin without a CORS preflight. A JSON route that accepted them could
// be driven by any page its user visits (cross-site request forgery), so
// they are refused; any other type, or none, is read as JSON, as upstream
// reads every body.
var formContentTypes = map[string]bool{
	"application/x-www-form-urlencoded": true,
	"multipart/form-data":               true,
	"text/plain":                        true,
}

func checkContentType(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		mt, _, _ = strings.Cut(ct, ";")
		mt = strings.ToLower(strings.TrimSpace(mt))
	}
	if formContentTypes[mt] {
		return &core.FieldError{Field: "Content-Type", Reason: fmt.Sprintf("%s is not accepted: send the body as application/json", mt)}
	}
	return nil
}

// fail answers the envelope for err and counts it in the error metric. An
// internal error whose cause the master knows (the data plane refused or
// is unreachable) says so instead of a bare "internal error".
func (s *server) fail(w http.ResponseWriter, r *http.Request, requestID string, err error) {
	metrics.RecordRetCode(r, envelope.CodeFor(err))
	if msg, ok := s.publicCause(err); ok {
		s.log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path,
			"request_id", requestID, "ret_code", envelope.CodeInternal, "err", err)
		envelope.Write(w, envelope.Response{RequestID: requestID, Ret: envelope.Ret{Code: envelope.CodeInternal, Msg: msg}})
		return
	}
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

// createFromImage is POST /cube/template/from-image: a JSON body, or
// upstream's multipart form with an envd binary to inject (multipart.go).
func (s *server) createFromImage(w http.ResponseWriter, r *http.Request) {
	var body cubeview.FromImageRequest
	var envd []byte
	if isMultipart(r) {
		if err := s.multipartAllowed(r); err != nil {
			s.fail(w, r, "", err)
			return
		}
		b, e, err := s.readMultipart(w, r)
		if err != nil {
			s.fail(w, r, "", err)
			return
		}
		body, envd = *b, e
	} else if !s.decode(w, r, &body) {
		return
	}
	if body.RequestID == "" {
		s.fail(w, r, "", required("requestID"))
		return
	}
	if s.cfg.Jobs == nil {
		s.fail(w, r, body.RequestID, errJobsOff)
		return
	}
	job, err := s.cfg.Jobs.CreateFromImageWithEnvd(r.Context(), body.Request(), s.baseURL(r), envd)
	s.jobAnswer(w, r, body.RequestID, job, err)
}

// getImageJob is GET /cube/template/from-image?job_id=J, or, with
// template_id=T (an id or an alias) instead, T's latest job.
func (s *server) getImageJob(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	jobID, tid := q.Get("job_id"), q.Get("template_id")
	switch {
	case jobID == "" && tid == "":
		s.fail(w, r, "", &core.FieldError{Field: "job_id", Reason: "is required (or template_id, for the template's latest job)"})
	case s.cfg.Jobs == nil:
		s.fail(w, r, "", errJobsOff)
	case jobID == "" && s.cfg.Catalog == nil:
		s.fail(w, r, "", errCatalogOff)
	case jobID == "":
		id, err := s.cfg.Catalog.ResolveTemplateKey(r.Context(), tid)
		var t *control.Template
		if err == nil {
			t, err = s.cfg.Catalog.GetTemplate(r.Context(), id)
		}
		if err == nil && t.JobID == "" {
			err = fmt.Errorf("template %s has no job: %w", id, core.ErrNotFound)
		}
		if err != nil {
			s.fail(w, r, "", err)
			return
		}
		job, err := s.cfg.Jobs.GetLiveJob(r.Context(), t.JobID)
		s.jobAnswer(w, r, "", job, err)
	default:
		job, err := s.cfg.Jobs.GetLiveJob(r.Context(), jobID)
		s.jobAnswer(w, r, "", job, err)
	}
}

// redo is POST /cube/template/redo.
func (s *server) redo(w http.ResponseWriter, r *http.Request) {
	var req cubeview.RedoRequest
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
		// The template may be named by its alias, as everywhere else.
		id, ok := s.templateKey(w, r, req.RequestID, req.TemplateID)
		if !ok {
			return
		}
		job, err := s.cfg.Jobs.Redo(r.Context(), control.RedoRequest{
			RequestID: req.RequestID, TemplateID: id, DistributionScope: req.DistributionScope,
			FailedOnly: req.FailedOnly, DownloadBaseURL: s.baseURL(r),
		})
		s.jobAnswer(w, r, req.RequestID, job, err)
	}
}

// templateKey turns the id or alias a request names into the template id
// (a key naming nothing comes back unchanged, for the service to answer
// not found); on failure it answers the envelope itself. Without a
// catalog the key is used as it is.
func (s *server) templateKey(w http.ResponseWriter, r *http.Request, requestID, key string) (string, bool) {
	if s.cfg.Catalog == nil {
		return key, true
	}
	id, err := s.cfg.Catalog.ResolveTemplateKey(r.Context(), key)
	if err != nil {
		s.fail(w, r, requestID, err)
		return "", false
	}
	return id, true
}

// migrate is POST /cube/template/migrate.
func (s *server) migrate(w http.ResponseWriter, r *http.Request) {
	var req cubeview.MigrateRequest
	if !s.decode(w, r, &req) {
		return
	}
	switch {
	case req.TemplateID == "":
		s.fail(w, r, req.RequestID, core.ErrTemplateIDRequired)
	case s.cfg.Migrations == nil:
		s.fail(w, r, req.RequestID, errMigrationsOff)
	case !s.backendConfigured(req.Backend):
		s.fail(w, r, req.RequestID, &core.FieldError{Field: "backend", Reason: fmt.Sprintf(
			"%q is not this deployment's artifact store (%s); for s3 set CUBE_S3_ENDPOINT, CUBE_S3_BUCKET, "+
				"CUBE_S3_ACCESS_KEY and CUBE_S3_SECRET_KEY on both services", req.Backend, s.backend())})
	default:
		id, ok := s.templateKey(w, r, req.RequestID, req.TemplateID)
		if !ok {
			return
		}
		job, err := s.cfg.Migrations.Migrate(r.Context(), control.MigrateRequest{RequestID: req.RequestID, TemplateID: id})
		s.jobAnswer(w, r, req.RequestID, job, err)
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
		job, err := s.cfg.Migrations.GetMigrateJob(r.Context(), jobID)
		s.jobAnswer(w, r, "", job, err)
	}
}

type listResponse struct {
	envelope.Response
	cubeview.ListResponse
}

type templateResponse struct {
	envelope.Response
	cubeview.TemplateResponse
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
	req, err := control.ParseCreateTemplateRequest(body)
	if err != nil {
		s.fail(w, r, head.RequestID, err)
		return
	}
	t, err := s.cfg.Catalog.CreateTemplate(r.Context(), req)
	if err != nil {
		s.fail(w, r, head.RequestID, err)
		return
	}
	s.write(w, r, templateResponse{Response: envelope.OK(head.RequestID), TemplateResponse: cubeview.NewTemplateResponse(t, false)})
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
		page, err := parseListPage(q)
		if err != nil {
			s.fail(w, r, "", err)
			return
		}
		list, err := s.cfg.Catalog.ListTemplates(r.Context())
		if err != nil {
			s.fail(w, r, "", err)
			return
		}
		items := make([]cubeview.TemplateItem, 0, len(list))
		for i := range list {
			if it := cubeview.NewTemplateItem(&list[i]); page.matches(&it) {
				items = append(items, it)
			}
		}
		out := cubeview.ListResponse{Data: items}
		if page.asked {
			total := len(items)
			out.Total = &total
			out.Data = page.cut(items)
			s.fillSizes(r.Context(), out.Data)
		}
		s.write(w, r, listResponse{Response: envelope.OK(""), ListResponse: out})
		return
	}
	inc := q.Get("include_request")
	id, err := s.cfg.Catalog.ResolveTemplateKey(r.Context(), id)
	if err != nil {
		s.fail(w, r, "", err)
		return
	}
	t, err := s.cfg.Catalog.GetTemplate(r.Context(), id)
	if err != nil {
		s.fail(w, r, "", err)
		return
	}
	s.write(w, r, templateResponse{Response: envelope.OK(""), TemplateResponse: cubeview.NewTemplateResponse(t, inc == "true" || inc == "1")})
}

type resolveResponse struct {
	envelope.Response
	cubeview.ResolveResponse
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
		d, err := s.cfg.Catalog.ResolveTemplate(r.Context(), key)
		if err != nil {
			s.fail(w, r, "", err)
			return
		}
		s.write(w, r, resolveResponse{Response: envelope.OK(""), ResolveResponse: cubeview.ResolveResponse{
			TemplateID: d.TemplateID, Alias: d.Alias, Status: string(d.Status), CreateRequest: cubeview.RawOrString(d.RequestJSON)}})
	}
}

type deleteResponse struct {
	envelope.Response
	cubeview.DeleteResponse
}

// deleteTemplate is DELETE /cube/template.
func (s *server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	var req cubeview.DeleteRequest
	if !s.decode(w, r, &req) {
		return
	}
	switch {
	case req.TemplateID == "":
		s.fail(w, r, req.RequestID, core.ErrTemplateIDRequired)
	case s.cfg.Catalog == nil:
		s.fail(w, r, req.RequestID, errCatalogOff)
	default:
		// An alias names the template here too, as upstream resolves it; the
		// answer echoes what the caller sent.
		id, err := s.cfg.Catalog.ResolveTemplateKey(r.Context(), req.TemplateID)
		if err != nil {
			s.fail(w, r, req.RequestID, err)
			return
		}
		if err := s.cfg.Catalog.Delete(r.Context(), id, req.InstanceType); err != nil {
			s.fail(w, r, req.RequestID, err)
			return
		}
		s.write(w, r, deleteResponse{Response: envelope.OK(req.RequestID), DeleteResponse: cubeview.DeleteResponse{TemplateID: req.TemplateID}})
	}
}

// setAlias is PUT /cube/template/{template_id}/alias with {"alias": ...};
// an absent, null or empty alias clears it (seed §3.1). An empty body is
// also a clear. The path may name the template by its current alias, and
// the answer is the whole template, as upstream's newest master answers.
func (s *server) setAlias(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "template_id")
	var req cubeview.AliasRequest
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
	id, err := s.cfg.Catalog.ResolveTemplateKey(r.Context(), id)
	if err != nil {
		s.fail(w, r, req.RequestID, err)
		return
	}
	if _, err := s.cfg.Catalog.SetAlias(r.Context(), id, &alias); err != nil {
		s.fail(w, r, req.RequestID, err)
		return
	}
	t, err := s.cfg.Catalog.GetTemplate(r.Context(), id)
	if err != nil {
		s.fail(w, r, req.RequestID, err)
		return
	}
	s.write(w, r, templateResponse{Response: envelope.OK(req.RequestID), TemplateResponse: cubeview.NewTemplateResponse(t, false)})
}

type buildStatusResponse struct {
	envelope.Response
	cubeview.BuildStatus
}

// buildStatus is GET /cube/template/build/{build_id}/status.
func (s *server) buildStatus(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "build_id")
	if s.cfg.Jobs == nil {
		s.fail(w, r, "", errJobsOff)
		return
	}
	j, err := s.cfg.Jobs.GetJob(r.Context(), id)
	if err != nil {
		s.fail(w, r, "", err)
		return
	}
	s.write(w, r, buildStatusResponse{Response: envelope.OK(""), BuildStatus: cubeview.NewBuildStatus(id, j)})
}

type rootfsResponse struct {
	envelope.Response
	cubeview.RootfsArtifactResponse
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
		resp.Job.ArtifactID, resp.Job.ArtifactStatus, resp.Job.Artifact = a.ArtifactID, string(a.Status), cubeview.NewArtifactInfo(a)
		s.write(w, r, resp)
	}
}

// backend is the artifact store kind migrate writes to ("file" unless
// configured).
func (s *server) backend() string {
	if s.cfg.StorageBackend == "" {
		return "file"
	}
	return s.cfg.StorageBackend
}

// backendConfigured reports whether a migrate's requested backend is the
// one this deployment stores artifacts in ("" means whatever it is).
// Migrate can only move bytes into the data plane's store: a request for
// another kind would otherwise answer READY without doing what it asked.
func (s *server) backendConfigured(want string) bool {
	want = strings.ToLower(strings.TrimSpace(want))
	switch want {
	case "":
		return true
	case "local", "filesystem":
		want = "file"
	case "gcs":
		want = "gs"
	}
	return want == s.backend()
}

type componentVersionsResponse struct {
	envelope.Response
	cubeview.ComponentVersionsResponse
}

// componentVersions is GET
// /internal/meta/templates/{template_id}/component-versions: upstream's
// meta route, behind the public API's authentication as upstream's meta
// group is, answering its envelope. The template may be named by alias.
func (s *server) componentVersions(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Catalog == nil {
		s.fail(w, r, "", errCatalogOff)
		return
	}
	id, ok := s.templateKey(w, r, "", chi.URLParam(r, "template_id"))
	if !ok {
		return
	}
	reps, err := s.cfg.Catalog.ComponentVersions(r.Context(), id)
	if err != nil {
		s.fail(w, r, "", err)
		return
	}
	s.write(w, r, componentVersionsResponse{Response: envelope.OK(""),
		ComponentVersionsResponse: cubeview.ComponentVersionsResponse{Data: cubeview.NewComponentVersions(id, reps)}})
}

// MaxListLimit is the largest page GET /cube/template answers.
const MaxListLimit = 1000

// listPage is the optional paging and filtering of GET /cube/template:
// status (exact, any case), q (a substring of the id, alias or image, any
// case), offset and limit (1..MaxListLimit). Without any of them the
// listing is whole, as upstream answers it.
type listPage struct {
	asked         bool
	status, text  string
	offset, limit int
}

func parseListPage(q url.Values) (listPage, error) {
	p := listPage{status: strings.TrimSpace(q.Get("status")), text: strings.ToLower(strings.TrimSpace(q.Get("q"))), limit: -1}
	p.asked = q.Has("status") || q.Has("q") || q.Has("offset") || q.Has("limit")
	if v := q.Get("offset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return p, &core.FieldError{Field: "offset", Reason: fmt.Sprintf("%q is not a whole number of 0 or more", v)}
		}
		p.offset = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxListLimit {
			return p, &core.FieldError{Field: "limit", Reason: fmt.Sprintf("%q is not a whole number from 1 to %d", v, MaxListLimit)}
		}
		p.limit = n
	}
	return p, nil
}

func (p listPage) matches(it *cubeview.TemplateItem) bool {
	if p.status != "" && !strings.EqualFold(it.Status, p.status) {
		return false
	}
	if p.text == "" {
		return true
	}
	for _, f := range []string{it.TemplateID, it.Alias, it.ImageInfo} {
		if strings.Contains(strings.ToLower(f), p.text) {
			return true
		}
	}
	return false
}

func (p listPage) cut(items []cubeview.TemplateItem) []cubeview.TemplateItem {
	if p.offset >= len(items) {
		return []cubeview.TemplateItem{}
	}
	items = items[p.offset:]
	if p.limit >= 0 && p.limit < len(items) {
		items = items[:p.limit]
	}
	return items
}

// fillSizes sets the rootfs size and builder of each item of a page from
// its artifact row (display data: a failed read leaves them out).
func (s *server) fillSizes(ctx context.Context, items []cubeview.TemplateItem) {
	if s.cfg.Artifacts == nil {
		return
	}
	for i := range items {
		if items[i].ArtifactID == "" {
			continue
		}
		if a, err := s.cfg.Artifacts.GetArtifact(ctx, items[i].ArtifactID); err == nil {
			items[i].SizeBytes = a.Ext4SizeBytes
			items[i].Builder = a.Builder
		}
	}
}
