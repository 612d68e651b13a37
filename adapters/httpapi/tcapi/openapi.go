package tcapi

import (
	"github.com/cubesandbox/templatecenter/adapters/httpapi/openapi"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
)

func errs(codes map[int]string) map[int]openapi.Response {
	out := map[int]openapi.Response{}
	for c, d := range codes {
		out[c] = openapi.Response{Doc: d, Body: wire.ErrorBody{}}
	}
	return out
}

func with(m map[int]openapi.Response, code int, r openapi.Response) map[int]openapi.Response {
	m[code] = r
	return m
}

var internalErrs = map[int]string{400: "bad request (the message names the field)", 401: "bad token",
	503: "no token configured, or the service is not ready"}

func merged(extra map[int]string) map[int]string {
	out := map[int]string{}
	for k, v := range internalErrs {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

// HealthResponse is the body of /health.
type HealthResponse struct {
	Status string `json:"status"` // ok or unavailable
	Error  string `json:"error,omitempty"`
}

// ReadyResponse is the body of /ready, the same document as the master's.
type ReadyResponse = wire.ReadyResponse

// downloadAuth: a node sends the artifact's token; the master, asking
// whether an artifact exists, the internal token.
var downloadAuth = []openapi.Auth{openapi.AuthArtifactToken, openapi.AuthCallbackToken}

// Operations documents every route New registers; the router test keeps
// the two equal.
func Operations() []openapi.Op {
	artifactParam := openapi.Param{Name: "artifact_id", In: "query", Doc: "artifact id", Required: true}
	return []openapi.Op{
		{Method: "POST", Path: wire.PathBuild, Tag: "internal", Auth: []openapi.Auth{openapi.AuthCallbackToken}, Summary: "Accept a build for a PENDING job (from the master)",
			Body: wire.BuildRequest{}, Responses: with(errs(merged(map[int]string{404: "job missing or not pending",
				409: "already in flight", 429: "at the concurrency cap (CUBE_TEMPLATE_CENTER_MAX_CONCURRENT_BUILDS)"})),
				202, openapi.Response{Doc: "accepted", Body: wire.BuildAccepted{}})},
		{Method: "POST", Path: wire.PathArtifactDelete, Tag: "internal", Auth: []openapi.Auth{openapi.AuthCallbackToken}, Summary: "Remove an artifact's bytes and row (idempotent)",
			Body: wire.DeleteArtifactRequest{}, Responses: with(errs(internalErrs), 200, openapi.Response{Doc: "deleted or absent", Body: wire.DeleteArtifactResponse{}})},
		{Method: "POST", Path: wire.PathArtifactUpload, Tag: "internal", Auth: []openapi.Auth{openapi.AuthCallbackToken}, Summary: "Store an uploaded ext4 (migrate), verified against sha256 and size",
			Description: "Also accepts upstream master's multipart/form-data form (fields artifact_id and file; sha256 and size " +
				"then come from the artifact row or are computed), answered with ext4_path, ext4_sha256 and ext4_size_bytes.",
			Params: []openapi.Param{{Name: "artifact_id", In: "query", Doc: "artifact id (raw form; the multipart form names it in a field)"},
				{Name: "sha256", In: "query", Doc: "lowercase hex (raw form)"},
				{Name: "size", In: "query", Doc: "bytes (raw form)"}},
			BodyType:  "application/octet-stream",
			Responses: with(errs(merged(map[int]string{413: "larger than the upload cap"})), 200, openapi.Response{Doc: "stored (or identical bytes were there)", Body: wire.UploadResponse{}})},
		{Method: "GET", Path: PathDownload, Tag: "downloads", Auth: downloadAuth, Summary: "Download an artifact's ext4 (Range, ETag; a presigned URL for object stores)",
			Params: []openapi.Param{artifactParam, {Name: "X-Cube-Artifact-Token", In: "header", Doc: "the artifact's download token", Required: true}},
			Responses: map[int]openapi.Response{200: {Doc: "the bytes", ContentType: "application/octet-stream"}, 206: {Doc: "a range", ContentType: "application/octet-stream"},
				302: {Doc: "presigned URL"}, 400: {Doc: "a bad artifact id, or the token or id given twice"},
				403: {Doc: "unknown artifact, or a missing or wrong token (one answer for both)"},
				404: {Doc: "not READY or no bytes (with the artifact's token); unknown artifact (with the internal token)"},
				416: {Doc: "no satisfiable range (bytes=-0 included, RFC 9110), or more than 16 ranges"}}},
		{Method: "HEAD", Path: PathDownload, Tag: "downloads", Auth: downloadAuth, Summary: "Artifact size and ETag",
			Params: []openapi.Param{artifactParam},
			Responses: map[int]openapi.Response{200: {Doc: "present"}, 403: {Doc: "unknown artifact, or a missing or wrong token (one answer for both)"},
				404: {Doc: "not READY or no bytes (with the artifact's token); unknown artifact (with the internal token)"}}},
		{Method: "GET", Path: PathCompat, Tag: "compat", Auth: []openapi.Auth{openapi.AuthCallbackToken}, Summary: "Compat report of the replicas against the release manifest (the master forwards its public route here)",
			Responses: with(errs(map[int]string{401: "bad token", 503: "no token configured"}), 200, openapi.Response{Doc: "upstream envelope", Body: compatResponse{}})},
		{Method: "POST", Path: PathCompat, Tag: "compat", Auth: []openapi.Auth{openapi.AuthCallbackToken}, Summary: "Rescan compat now (the master forwards its public route here)",
			Responses: with(errs(map[int]string{401: "bad token", 503: "no token configured"}), 200, openapi.Response{Doc: "upstream envelope", Body: compatResponse{}})},
		{Method: "GET", Path: PathHealth, Tag: "operations", Summary: "Health: the artifact store is attached and the database answers",
			Responses: map[int]openapi.Response{200: {Doc: "ok", Body: HealthResponse{}}, 503: {Doc: "unavailable", Body: HealthResponse{}}}},
		{Method: "GET", Path: PathReady, Tag: "operations", Summary: "Readiness, check by check (database, artifact store; callback_token when the request carries one)",
			Description: "A request carrying " + openapi.TokenHeader + " also gets a callback_token check: failed when the token is not this service's " +
				"(the master asks this way, so that two services with different tokens are not ready).",
			Responses: map[int]openapi.Response{200: {Doc: "ready", Body: ReadyResponse{}}, 503: {Doc: "unavailable", Body: ReadyResponse{}}}},
		{Method: "GET", Path: PathMetrics, Tag: "operations", Summary: "Prometheus metrics",
			Responses: map[int]openapi.Response{200: {Doc: "exposition format", ContentType: "text/plain"}}},
		{Method: "GET", Path: PathOpenAPI, Tag: "operations", Summary: "This document",
			Responses: map[int]openapi.Response{200: {Doc: "OpenAPI 3", ContentType: "application/json"}}},
	}
}

// OpenAPI renders the data plane's document.
func OpenAPI() ([]byte, error) {
	return openapi.Document("templatecenter", "1",
		"Data plane of CubeTemplateCenter: the internal build API (shared token), artifact downloads, compat, operations routes.",
		Operations())
}
