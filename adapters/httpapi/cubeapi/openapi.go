package cubeapi

import (
	"encoding/json"
	"github.com/cubesandbox/templatecenter/core"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/cubeview"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/envelope"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/openapi"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
)

const (
	tagTemplates = "templates"
	tagInternal  = "internal"
	tagOps       = "operations"
)

// envelopeDoc describes the public routes' answers.
const envelopeDoc = "Always HTTP 200 with the upstream envelope: ret.ret_code is 200 on success, " +
	"130400 bad parameters, 130401 authentication failed (when authentication is on: send Authorization: Bearer <token> " +
	"or upstream's signed cube_user_id, cube_timestamp, cube_nonce, cube_sgn_method, cube_signature headers), 130404 not found, 130409 conflict, 130429 busy, " +
	"130593 internal (the message names the cause when the master knows it), 130594 database."

func ok(body any) map[int]openapi.Response {
	return map[int]openapi.Response{200: {Doc: envelopeDoc, Body: body}}
}

var (
	qJobID    = openapi.Param{Name: "job_id", In: "query", Doc: "job id, as create-from-image, redo and migrate answer", Required: true}
	pTemplate = openapi.Param{Name: "template_id", In: "path", Doc: "template id"}
)

type ackResponse struct {
	envelope.Response
}

// Operations documents every route New registers; the router test keeps
// the two equal. Template routes without an Auth of their own are behind
// the public API's credentials.
func Operations() []openapi.Op {
	ops := operations()
	for i := range ops {
		if ops[i].Tag == tagTemplates && ops[i].Auth == nil {
			ops[i].Auth = []openapi.Auth{openapi.AuthPublic}
		}
	}
	return ops
}

// caAuth: the certificate is anyone's; the key needs the shared token.
var caAuth = []openapi.Auth{openapi.AuthAnonymous, openapi.AuthCallbackToken}

// downloadAuth: nodes send the artifact's own token.
var downloadAuth = []openapi.Auth{openapi.AuthArtifactToken}

func operations() []openapi.Op {
	return []openapi.Op{
		{Method: "POST", Path: PathFromImage, Tag: tagTemplates, Summary: "Build a template from an OCI image and distribute it",
			Description: "Creates a job (one active job per template: invariant I1) and hands it to the template center; poll GET on the same path.",
			Body:        cubeview.FromImageRequest{}, Responses: ok(jobResponse{})},
		{Method: "GET", Path: PathFromImage, Tag: tagTemplates, Summary: "Poll a create-from-image or redo job (live pull counters while active)",
			Params: []openapi.Param{{Name: "job_id", In: "query", Doc: "job id, as create-from-image and redo answer; or, instead:"},
				{Name: "template_id", In: "query", Doc: "a template id or alias: its latest job"}},
			Responses: ok(jobResponse{})},
		{Method: "POST", Path: PathRedo, Tag: tagTemplates, Summary: "Redistribute a template to its nodes (reusing the artifact or rebuilding it)",
			Body: cubeview.RedoRequest{}, Responses: ok(jobResponse{})},
		{Method: "POST", Path: PathMigrate, Tag: tagTemplates, Summary: "Move a template's artifact into the data plane's store (tpl merge)",
			Description: "backend, when given, must be the deployment's store kind; another one is refused with 130400.",
			Body:        cubeview.MigrateRequest{}, Responses: ok(jobResponse{})},
		{Method: "GET", Path: PathMigrate, Tag: tagTemplates, Summary: "Poll a migrate job",
			Params: []openapi.Param{qJobID}, Responses: ok(jobResponse{})},
		{Method: "POST", Path: PathTemplate, Tag: tagTemplates, Summary: "Create a template from a sandbox create request (answers once every node has snapshotted it)",
			Body: json.RawMessage{}, Responses: ok(templateResponse{})},
		{Method: "GET", Path: PathTemplate, Tag: tagTemplates, Summary: "List templates, or get one with ?template_id=",
			Params: []openapi.Param{
				{Name: "template_id", In: "query", Doc: "template id or alias; absent lists every template"},
				{Name: "include_request", In: "query", Doc: "true or 1: include the stored sandbox create request"},
				{Name: "status", In: "query", Doc: "listing only: templates with this status (any case)"},
				{Name: "q", In: "query", Doc: "listing only: templates whose id, alias or image contains this text (any case)"},
				{Name: "offset", In: "query", Doc: "listing only: skip this many matching templates (default 0)"},
				{Name: "limit", In: "query", Doc: "listing only: answer at most this many, 1 to 1000 (default all); any of status, q, offset, limit adds total"}},
			Responses: map[int]openapi.Response{200: {Doc: envelopeDoc + " Without template_id the body is the list (listResponse), with it one template (templateResponse).", Body: templateResponse{}}}},
		{Method: "DELETE", Path: PathTemplate, Tag: tagTemplates, Summary: "Delete a template from every node and the stores (three-phase, reference-counted)",
			Description: "template_id may be the template's alias; the answer echoes what the caller sent.",
			Body:        cubeview.DeleteRequest{}, Responses: ok(deleteResponse{})},
		{Method: "PUT", Path: PathAlias, Tag: tagTemplates, Summary: "Set a template's alias (absent, null or empty clears it); answers the whole template",
			Params: []openapi.Param{pTemplate}, Body: cubeview.AliasRequest{}, Responses: ok(templateResponse{})},
		{Method: "GET", Path: PathJobs, Tag: tagTemplates, Summary: "Jobs across templates (or one template's history), the most recently updated first, with live pull counters",
			Description: "This service's own, for the console. unfinished=1 lists PENDING, RUNNING and BUILT jobs only, each with its target nodes.",
			Params: []openapi.Param{{Name: "template_id", In: "query", Doc: "a template id or alias: its jobs only"},
				{Name: "unfinished", In: "query", Doc: "true or 1: jobs not yet READY or FAILED"},
				{Name: "limit", In: "query", Doc: "at most this many, 1 to 1000 (default 100)"}},
			Responses: ok(buildListResponse{})},
		{Method: "GET", Path: PathJobLog, Tag: tagTemplates, Summary: "The lines the services logged about a job (INFO and above), oldest first",
			Description: "Kept in the database (t_cube_template_job_log): every master replica answers the same, and they survive restarts. A job keeps its newest 500 lines, for 14 days.",
			Params:      []openapi.Param{qJobID, {Name: "limit", In: "query", Doc: "the newest this many, 1 to 1000 (default all kept)"}},
			Responses:   ok(jobLogResponse{})},
		{Method: "GET", Path: PathNodes, Tag: tagTemplates, Summary: "The nodes: health from this master's probes, READY template copies held and their bytes",
			Responses: ok(nodeListResponse{})},
		{Method: "GET", Path: PathComponentVersions, Tag: tagTemplates, Summary: "The component versions (guest image, agent, kernel, shim) each node reported for the template's snapshot",
			Description: "Upstream's meta route: behind the public API's authentication, with its envelope; template_id may be an alias. 130404 for a template without a definition.",
			Params:      []openapi.Param{{Name: "template_id", In: "path", Doc: "template id or alias"}}, Responses: ok(componentVersionsResponse{})},
		{Method: "GET", Path: PathPlacementPolicy, Tag: tagTemplates, Summary: "The placement policy in force and where it came from (api, file or default)",
			Responses: ok(placementPolicyResponse{})},
		{Method: "PUT", Path: PathPlacementPolicy, Tag: tagTemplates, Summary: "Replace the placement policy every master applies; {} or an empty body brings back the configuration's",
			Description: "The body is a policy document (docs/operations.md#placement); a bad one is 130400 naming the field.",
			Body:        core.PlacementPolicy{}, Responses: ok(placementPolicyResponse{})},
		{Method: "GET", Path: PathTemplatePlacements, Tag: tagTemplates, Summary: "The placement controller's recent decisions about a template, newest first",
			Params: []openapi.Param{{Name: "template_id", In: "path", Doc: "template id or alias"}}, Responses: ok(placementDecisionsResponse{})},
		{Method: "GET", Path: PathBuildStatus, Tag: tagTemplates, Summary: "A build's status; the build id is the job id",
			Params: []openapi.Param{{Name: "build_id", In: "path", Doc: "job id"}}, Responses: ok(buildStatusResponse{})},
		{Method: "GET", Path: PathResolve, Tag: tagTemplates, Summary: "Resolve a template id or alias to the template a sandbox create would use",
			Params:    []openapi.Param{{Name: "template", In: "query", Doc: "template id or alias", Required: true}},
			Responses: ok(resolveResponse{})},
		{Method: "POST", Path: PathResolve, Tag: tagTemplates, Summary: "Complete a sandbox create request from the template its template id annotation names (id or alias), creating nothing",
			Description: "The template needs a READY replica on a healthy node; the caller's values are kept and a fresh request id is set.",
			Body:        json.RawMessage{}, Responses: ok(resolvedResponse{})},
		{Method: "POST", Path: PathPreview, Tag: tagTemplates, Summary: "Preview a sandbox create (tpl render): the caller's request, the request merged with its template, the node request",
			Description: "A request naming no template is previewed as is.",
			Body:        json.RawMessage{}, Responses: ok(previewResponse{})},
		{Method: "GET", Path: PathCA, Tag: tagTemplates, Auth: caAuth, Summary: "The CubeEgress root CA (cube-root-ca.crt; cube-root-ca.key needs the shared token)",
			Params: []openapi.Param{{Name: "filename", In: "path", Doc: "cube-root-ca.crt or cube-root-ca.key"},
				{Name: openapi.TokenHeader, In: "header", Doc: "the shared token, for the private key only"}},
			Responses: map[int]openapi.Response{200: {Doc: "the file", ContentType: "application/octet-stream"},
				401: {Doc: "the private key without the shared token", Body: envelope.Response{}},
				404: {Doc: "not a served CA file, or not installed", Body: envelope.Response{}}}},
		{Method: "HEAD", Path: PathCA, Tag: tagTemplates, Auth: caAuth, Summary: "The CubeEgress root CA's size without the bytes",
			Params: []openapi.Param{{Name: "filename", In: "path", Doc: "cube-root-ca.crt or cube-root-ca.key"},
				{Name: openapi.TokenHeader, In: "header", Doc: "the shared token, for the private key only"}},
			Responses: map[int]openapi.Response{200: {Doc: "present"}, 401: {Doc: "the private key without the shared token"},
				404: {Doc: "not a served CA file, or not installed"}}},
		{Method: "GET", Path: PathRootfsArtifact, Tag: tagTemplates, Summary: "An artifact row (the download token is never shown)",
			Params:    []openapi.Param{{Name: "artifact_id", In: "query", Doc: "artifact id", Required: true}},
			Responses: ok(rootfsResponse{})},
		{Method: "GET", Path: PathCompat, Tag: tagTemplates, Summary: "Compat report of the replicas against the release manifest (proxied to the template center)",
			Responses: ok(ackResponse{})},
		{Method: "POST", Path: PathCompat, Tag: tagTemplates, Summary: "Rescan compat (proxied to the template center)",
			Responses: ok(ackResponse{})},
		{Method: "GET", Path: PathDownload, Tag: tagTemplates, Auth: downloadAuth, Summary: "Download an artifact's ext4 (proxied to the template center; real HTTP statuses)",
			Params: []openapi.Param{{Name: "artifact_id", In: "query", Doc: "artifact id", Required: true},
				{Name: "X-Cube-Artifact-Token", In: "header", Doc: "the artifact's download token", Required: true}},
			Responses: map[int]openapi.Response{200: {Doc: "the bytes (Range supported)", ContentType: "application/octet-stream"},
				302: {Doc: "presigned object-store URL"}, 403: {Doc: "unknown artifact, or a missing or wrong token (one answer for both)"},
				404: {Doc: "artifact not READY or without bytes (with its token)"}, 502: {Doc: "template center unreachable"}}},
		{Method: "HEAD", Path: PathDownload, Tag: tagTemplates, Auth: downloadAuth, Summary: "Artifact size and ETag without the bytes (proxied)",
			Params: []openapi.Param{{Name: "artifact_id", In: "query", Doc: "artifact id", Required: true}},
			Responses: map[int]openapi.Response{200: {Doc: "present"}, 403: {Doc: "unknown artifact, or a missing or wrong token (one answer for both)"},
				404: {Doc: "artifact not READY or without bytes (with its token)"}}},
		{Method: "GET", Path: core.ChunkIndexPath, Tag: tagTemplates, Auth: downloadAuth, Summary: "An artifact's chunk index (proxied to the template center)",
			Params: []openapi.Param{{Name: "artifact_id", In: "query", Doc: "artifact id", Required: true},
				{Name: "X-Cube-Artifact-Token", In: "header", Doc: "the artifact's download token", Required: true}},
			Responses: map[int]openapi.Response{200: {Doc: "the encoded index", ContentType: "application/octet-stream"},
				403: {Doc: "unknown artifact, or a missing or wrong token (one answer for both)"},
				404: {Doc: "not READY, or no chunk index: download the whole file"}, 502: {Doc: "template center unreachable"}}},
		{Method: "GET", Path: core.ChunkDataPath, Tag: tagTemplates, Auth: downloadAuth, Summary: "Data chunks of an artifact, by their numbers in its index (proxied to the template center)",
			Params: []openapi.Param{{Name: "artifact_id", In: "query", Doc: "artifact id", Required: true},
				{Name: "X-Cube-Artifact-Token", In: "header", Doc: "the artifact's download token", Required: true},
				{Name: "first", In: "query", Doc: "the first chunk's number", Required: true},
				{Name: "count", In: "query", Doc: "how many chunks (1..256)", Required: true}},
			Responses: map[int]openapi.Response{200: {Doc: "the chunks' bytes", ContentType: "application/octet-stream"},
				403: {Doc: "unknown artifact, or a missing or wrong token (one answer for both)"},
				404: {Doc: "not READY, or no chunk index"}, 502: {Doc: "template center unreachable"}}},
		{Method: "POST", Path: wire.PathJobStatus, Tag: tagInternal, Auth: []openapi.Auth{openapi.AuthCallbackToken}, Summary: "Status callback from the data plane (internal)",
			Params: []openapi.Param{{Name: "job_id", In: "path", Doc: "job id"}}, Body: wire.StatusReport{},
			Responses: map[int]openapi.Response{200: {Doc: "applied or acknowledged as stale", Body: wire.StatusOK{}},
				400: {Doc: "bad body", Body: wire.ErrorBody{}}, 401: {Doc: "bad token", Body: wire.ErrorBody{}},
				404: {Doc: "unknown job", Body: wire.ErrorBody{}}, 409: {Doc: "refused transition", Body: wire.ErrorBody{}},
				503: {Doc: "no token configured", Body: wire.ErrorBody{}}}},
		{Method: "GET", Path: PathHealth, Tag: tagOps, Summary: "Liveness: the process is up (checks no dependency)",
			Responses: map[int]openapi.Response{200: {Doc: "up", Body: map[string]string{}}}},
		{Method: "GET", Path: PathReady, Tag: tagOps, Summary: "Readiness: the data plane, the database and the nodes",
			Responses: map[int]openapi.Response{200: {Doc: "every check passed", Body: ReadyResponse{}}, 503: {Doc: "a check failed", Body: ReadyResponse{}}}},
		{Method: "GET", Path: PathMetrics, Tag: tagOps, Summary: "Prometheus metrics",
			Responses: map[int]openapi.Response{200: {Doc: "exposition format", ContentType: "text/plain"}}},
		{Method: "GET", Path: PathOpenAPI, Tag: tagOps, Summary: "This document",
			Responses: map[int]openapi.Response{200: {Doc: "OpenAPI 3", ContentType: "application/json"}}},
	}
}

// OpenAPI renders the master's document.
func OpenAPI() ([]byte, error) {
	return openapi.Document("cubemaster", "1",
		"Control plane of CubeTemplateCenter: the public /cube/* template API (upstream envelope), "+
			"the data plane's status callback, operations routes.", Operations())
}
