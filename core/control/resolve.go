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
	// The node resolves its local template by id, never by alias; the
	// label says which template the sandbox comes from.
	merged.Annotations[core.AnnotationTemplateID] = def.TemplateID
	merged.Labels[core.AnnotationTemplateID] = def.TemplateID
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
//   - the network policy (cube_network_config, or cubevs_context in older
//     requests) as upstream merges it (mergeCubeNetworkConfigs): see
//     MergeNetworkPolicy;
//   - the two app-snapshot version annotations are made equal (whichever
//     is set wins);
//   - the label cube.master.appsnapshot.template.id names the template
//     the annotation of that name names, as upstream labels the request.
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
	out.CubeVSContext, out.CubeNetworkConfig = cloneVS(caller.CubeVSContext), cloneVS(caller.CubeNetworkConfig)
	if template == nil {
		normalizeVersions(out.Annotations)
		labelTemplate(&out)
		return &out
	}
	if policy := MergeNetworkPolicy(template.NetworkPolicy(), caller.NetworkPolicy()); policy != nil {
		// The merged policy goes under every key either request used, so
		// the key a node reads (the newer one first) holds all of it.
		newKey := template.CubeNetworkConfig != nil || caller.CubeNetworkConfig != nil
		oldKey := template.CubeVSContext != nil || caller.CubeVSContext != nil
		out.CubeNetworkConfig, out.CubeVSContext = nil, nil
		if newKey {
			out.CubeNetworkConfig = policy
		}
		if oldKey {
			out.CubeVSContext = cloneVS(policy)
		}
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
	labelTemplate(&out)
	return &out
}

// labelTemplate sets the label cube.master.appsnapshot.template.id to the
// template the request's annotation of that name names.
func labelTemplate(r *core.SandboxRequest) {
	if tid := r.Annotations[core.AnnotationTemplateID]; tid != "" {
		r.Labels[core.AnnotationTemplateID] = tid
	}
}

// MergeNetworkPolicy merges a template's network policy with a caller's,
// as upstream's mergeCubeNetworkConfigs does (the older mergeCubeVSContexts
// is the same rule for the fields it knew): with one side missing the
// other is taken whole; with both, the template's is the base and
//
//   - allowInternetAccess, allowPublicTraffic, maskRequestHost: the
//     caller's when set;
//   - allowOut, denyOut: the template's, then the caller's entries it does
//     not already list (empty ones skipped): a caller can add, not remove;
//   - rules: the caller's first, then the template's (the first match
//     wins, so a sandbox's own rules come before its template's).
//
// Neither input is modified; nil when both are nil.
func MergeNetworkPolicy(template, caller *core.CubeVSContext) *core.CubeVSContext {
	switch {
	case template == nil:
		return cloneVS(caller)
	case caller == nil:
		return cloneVS(template)
	}
	out := cloneVS(template)
	if caller.AllowInternetAccess != nil {
		v := *caller.AllowInternetAccess
		out.AllowInternetAccess = &v
	}
	if caller.AllowPublicTraffic != nil {
		v := *caller.AllowPublicTraffic
		out.AllowPublicTraffic = &v
	}
	if caller.MaskRequestHost != nil {
		v := *caller.MaskRequestHost
		out.MaskRequestHost = &v
	}
	out.AllowOut = appendUniqueCIDRs(out.AllowOut, caller.AllowOut)
	out.DenyOut = appendUniqueCIDRs(out.DenyOut, caller.DenyOut)
	if len(caller.Rules) > 0 {
		out.Rules = nil
		for _, r := range append(slices.Clone(caller.Rules), template.Rules...) {
			if r != nil {
				out.Rules = append(out.Rules, r)
			}
		}
	}
	return out
}

// appendUniqueCIDRs is base followed by the entries of extra that are
// neither empty nor already listed.
func appendUniqueCIDRs(base, extra []string) []string {
	seen := map[string]bool{}
	for _, c := range base {
		seen[c] = true
	}
	for _, c := range extra {
		if c == "" || seen[c] {
			continue
		}
		seen[c] = true
		base = append(base, c)
	}
	return base
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
