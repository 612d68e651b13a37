package control

import (
	"context"
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
	if merged.RequestID == "" {
		merged.RequestID = s.IDs.NewJobID()
	}
	out := &ResolvedRequest{Request: merged, TemplateID: def.TemplateID}
	if key != def.TemplateID {
		out.Alias = key
	}
	return out, nil
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
