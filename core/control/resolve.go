package control

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/cubesandbox/templatecenter/core"
)

// ResolvedRequest is a sandbox create request filled from its template.
type ResolvedRequest struct {
	// Request is the caller's request completed from the template.
	Request *core.SandboxRequest
	// TemplateID is the template the request named (by id or alias);
	// Alias is the alias it was named by, if any.
	TemplateID string
	Alias      string
}

// ResolveSandboxRequest turns a sandbox create request that names a
// template into the request a node is given (seed 002 §8, upstream
// ResolveTemplate): it takes the template id or alias from the
// cube.master.appsnapshot.template.id annotation, requires a READY replica
// on a healthy node (core.ErrTemplateNotReady), loads the template's stored
// request and fills the caller's request from it with MergeTemplateRequest.
// The caller's request is not modified. A request naming no template is
// core.ErrTemplateIDRequired; an unknown id or alias core.ErrNotFound.
func (s *Service) ResolveSandboxRequest(ctx context.Context, req *core.SandboxRequest) (*ResolvedRequest, error) {
	if req == nil {
		return nil, &core.FieldError{Field: "body", Reason: "is empty"}
	}
	key := strings.TrimSpace(req.Annotations[core.AnnotationTemplateID])
	if key == "" {
		return nil, fmt.Errorf("annotation %s: %w", core.AnnotationTemplateID, core.ErrTemplateIDRequired)
	}
	def, err := s.ResolveTemplate(ctx, key)
	if err != nil {
		return nil, err
	}
	tpl, _, err := core.ParseSandboxRequest([]byte(def.RequestJSON))
	if err != nil {
		return nil, fmt.Errorf("template %s: stored request: %w", def.TemplateID, err)
	}
	merged := MergeTemplateRequest(tpl, req)
	// The node resolves its local template by id, never by alias.
	merged.Annotations[core.AnnotationTemplateID] = def.TemplateID
	if err := s.fillDownloadTokens(ctx, merged); err != nil {
		return nil, fmt.Errorf("template %s: %w", def.TemplateID, err)
	}
	if merged.RequestID == "" {
		merged.RequestID = s.IDs.NewJobID()
	}
	out := &ResolvedRequest{Request: merged, TemplateID: def.TemplateID}
	if key != def.TemplateID {
		out.Alias = key
	}
	return out, nil
}

// fillDownloadTokens gives the artifact images of req the download token of
// their artifact, which the stored request leaves out (StoredRequest): a
// node that lacks the artifact fetches it with the URL. An artifact row
// that is gone leaves its image as it is.
func (s *Service) fillDownloadTokens(ctx context.Context, req *core.SandboxRequest) error {
	seen := map[string]bool{}
	for _, c := range req.Containers {
		if c.Image == nil {
			continue
		}
		id := c.Image.Annotations[core.AnnotationArtifactID]
		if id == "" || seen[id] {
			continue
		}
		seen[id] = true
		a, err := s.Store.Artifacts().Get(ctx, id)
		switch {
		case isNotFound(err):
			continue
		case err != nil:
			return fmt.Errorf("artifact %s: %w", id, err)
		}
		WithDownloadToken(req, id, s.downloadToken(a))
	}
	return nil
}

// storedRequestWithTokens is a template's stored request (JSON) as callers
// are shown it: with the download token of each artifact image filled in
// (StoredRequest leaves it out). Keys the request types do not know (a
// row upstream wrote) are kept; JSON that does not parse, or an artifact
// whose row is gone, is left as it is. The API redacts the token for
// callers that may not see it.
func (s *Service) storedRequestWithTokens(ctx context.Context, raw string) string {
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	var doc map[string]any
	if dec.Decode(&doc) != nil {
		return raw
	}
	containers, _ := doc["containers"].([]any)
	changed := false
	for _, c := range containers {
		cm, _ := c.(map[string]any)
		img, _ := cm["image"].(map[string]any)
		ann, _ := img["annotations"].(map[string]any)
		id, _ := ann[core.AnnotationArtifactID].(string)
		if id == "" {
			continue
		}
		a, err := s.Store.Artifacts().Get(ctx, id)
		if err != nil {
			continue
		}
		token := s.downloadToken(a)
		if token == "" {
			continue
		}
		ann[core.AnnotationArtifactToken] = token
		if u, ok := ann[core.AnnotationArtifactURL].(string); ok {
			ann[core.AnnotationArtifactURL] = withURLToken(u, token)
		}
		changed = true
	}
	if !changed {
		return raw
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(doc) != nil {
		return raw
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// MergeTemplateRequest fills a caller's sandbox request from a template's
// stored request, keeping every value the caller set (seed 002 §8.1,
// upstream applyTemplateRequest):
//
//   - annotations and labels: the template's keys the caller has not set;
//   - volumes: the template's, after the caller's, except those whose name
//     the caller already uses;
//   - containers: position by position, the template's container where
//     the caller has none (fewer containers, or an empty one);
//   - network type, runtime handler, namespace: the template's when the
//     caller's is empty;
//   - the two app-snapshot version annotations are made equal (whichever
//     is set wins).
//
// Everything else is the caller's. Neither input is modified; the result
// shares no maps or slices with them.
func MergeTemplateRequest(template, caller *core.SandboxRequest) *core.SandboxRequest {
	if caller == nil {
		caller = &core.SandboxRequest{}
	}
	out := *caller
	out.Annotations = maps.Clone(caller.Annotations)
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Labels = maps.Clone(caller.Labels)
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	out.Volumes = slices.Clone(caller.Volumes)
	out.Containers = slices.Clone(caller.Containers)
	if template == nil {
		normalizeVersions(out.Annotations)
		return &out
	}
	fillMissing(out.Annotations, template.Annotations)
	fillMissing(out.Labels, template.Labels)
	used := map[string]bool{}
	for _, v := range out.Volumes {
		used[v.Name] = true
	}
	for _, v := range template.Volumes {
		if !used[v.Name] {
			out.Volumes = append(out.Volumes, v)
		}
	}
	for i, c := range template.Containers {
		switch {
		case i >= len(out.Containers):
			out.Containers = append(out.Containers, c)
		case reflect.ValueOf(out.Containers[i]).IsZero():
			out.Containers[i] = c
		}
	}
	out.NetworkType = firstString(out.NetworkType, template.NetworkType)
	out.RuntimeHandler = firstString(out.RuntimeHandler, template.RuntimeHandler)
	out.Namespace = firstString(out.Namespace, template.Namespace)
	normalizeVersions(out.Annotations)
	return &out
}

func fillMissing(dst, src map[string]string) {
	for k, v := range src {
		if _, ok := dst[k]; !ok {
			dst[k] = v
		}
	}
}

// normalizeVersions sets both app-snapshot version annotations to the one
// that is set (cube.master.appsnapshot.version first), as upstream's
// NormalizeAppSnapshotAnnotations does.
func normalizeVersions(ann map[string]string) {
	v := firstString(ann[core.AnnotationAppSnapshotVersion], ann[core.AnnotationTemplateVersion])
	if v != "" {
		ann[core.AnnotationAppSnapshotVersion] = v
		ann[core.AnnotationTemplateVersion] = v
	}
}

// ResolveTemplateKey turns what a caller named a template by (GET, DELETE,
// the alias PUT) into its template id: a key that is a template id (it has
// a definition or a job) is returned as is, otherwise an alias is looked
// up. A key that names nothing is returned unchanged, so the caller's own
// lookup reports it as not found. Unlike upstream, a key is never required
// to start with tpl- or snap-: the id is simply tried first, so an alias
// can never shadow a template id.
func (s *Service) ResolveTemplateKey(ctx context.Context, key string) (string, error) {
	key = strings.TrimSpace(key)
	if key == "" {
		return "", core.ErrTemplateIDRequired
	}
	tpl := s.Store.Templates()
	if _, err := tpl.GetDefinition(ctx, key); err == nil {
		return key, nil
	} else if !isNotFound(err) {
		return "", err
	}
	if _, err := s.Store.Jobs().Latest(ctx, key); err == nil {
		return key, nil
	} else if !isNotFound(err) {
		return "", err
	}
	if core.ValidateAlias(key) != nil {
		return key, nil
	}
	def, err := tpl.GetDefinitionByAlias(ctx, key)
	switch {
	case err == nil:
		return def.TemplateID, nil
	case isNotFound(err):
		return key, nil
	}
	return "", err
}
