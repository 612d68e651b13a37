package control

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/cubesandbox/templatecenter/core"
)

// ResolveTemplate turns a template id or an alias into its definition, for
// sandbox create. The id is tried first, the alias second, so an alias can
// never shadow a template id. The template must have a READY replica on a
// healthy node of its instance type (core.ErrTemplateNotReady otherwise).
func (s *Service) ResolveTemplate(ctx context.Context, idOrAlias string) (*core.Definition, error) {
	idOrAlias = strings.TrimSpace(idOrAlias)
	if idOrAlias == "" {
		return nil, core.ErrTemplateIDRequired
	}
	tpl := s.Store.Templates()
	def, err := tpl.GetDefinition(ctx, idOrAlias)
	if isNotFound(err) && core.ValidateAlias(idOrAlias) == nil {
		def, err = tpl.GetDefinitionByAlias(ctx, idOrAlias)
	}
	if isNotFound(err) {
		return nil, fmt.Errorf("template or alias %q: %w", idOrAlias, core.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	replicas, err := tpl.ListReplicas(ctx, def.TemplateID)
	if err != nil {
		return nil, err
	}
	nodes, err := s.Nodes.HealthyNodes(ctx, firstString(def.InstanceType, core.DefaultInstanceType))
	if err != nil {
		return nil, fmt.Errorf("list healthy nodes: %w", err)
	}
	healthy := map[string]bool{}
	for _, n := range nodes {
		healthy[n.ID] = true
	}
	for _, r := range replicas {
		if r.Status == core.ReplicaReady && healthy[r.NodeID] {
			return def, nil
		}
	}
	return nil, fmt.Errorf("template %s has no READY replica on a healthy node: %w", def.TemplateID, core.ErrTemplateNotReady)
}

// SetAlias sets or clears (nil, "") a template's alias. An alias held by
// another template, or equal to another template's id, is core.ErrConflict
// naming the holder.
func (s *Service) SetAlias(ctx context.Context, templateID string, alias *string) (*core.Definition, error) {
	if err := core.ValidateTemplateID(templateID); err != nil {
		return nil, err
	}
	a, err := core.NormalizeAlias(alias)
	if err != nil {
		return nil, err
	}
	tpl := s.Store.Templates()
	if a != "" {
		if other, err := tpl.GetDefinition(ctx, a); err == nil && other.TemplateID != templateID {
			return nil, fmt.Errorf("alias %q is the id of template %s: %w", a, other.TemplateID, core.ErrConflict)
		}
	}
	def, err := tpl.UpdateDefinition(ctx, templateID, func(d *core.Definition) error {
		d.Alias = a
		return nil
	})
	if errors.Is(err, core.ErrConflict) {
		return nil, fmt.Errorf("alias %q is already used by template %s: %w", a, s.aliasHolder(ctx, a), core.ErrConflict)
	}
	if err != nil {
		return nil, err
	}
	return def, nil
}

// checkAliasFree refuses an alias held by another template (or equal to
// another template's id). The resume pipeline re-checks when it writes
// the definition; this early check turns the common case into a clear
// error instead of a build whose alias is dropped.
func (s *Service) checkAliasFree(ctx context.Context, templateID, alias string) error {
	if alias == "" {
		return nil
	}
	tpl := s.Store.Templates()
	if d, err := tpl.GetDefinitionByAlias(ctx, alias); err == nil && d.TemplateID != templateID {
		return fmt.Errorf("alias %q is already used by template %s: %w", alias, d.TemplateID, core.ErrConflict)
	} else if err != nil && !isNotFound(err) {
		return err
	}
	if d, err := tpl.GetDefinition(ctx, alias); err == nil && d.TemplateID != templateID {
		return fmt.Errorf("alias %q is the id of template %s: %w", alias, d.TemplateID, core.ErrConflict)
	}
	return nil
}

func (s *Service) aliasHolder(ctx context.Context, alias string) string {
	if h, err := s.Store.Templates().GetDefinitionByAlias(ctx, alias); err == nil {
		return h.TemplateID
	}
	if h, err := s.Store.Templates().GetDefinition(ctx, alias); err == nil {
		return h.TemplateID
	}
	return "another template"
}
