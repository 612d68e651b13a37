package control

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// ResolveTemplate turns a template id or an alias into its definition, for
// sandbox create. Ids and aliases share one namespace (the store's names),
// so a name means one template whichever kind it is. The template must
// have a READY replica on a healthy node of its instance type
// (core.ErrTemplateNotReady otherwise).
func (s *Service) ResolveTemplate(ctx context.Context, idOrAlias string) (*core.Definition, error) {
	idOrAlias = strings.TrimSpace(idOrAlias)
	if idOrAlias == "" {
		return nil, core.ErrTemplateIDRequired
	}
	tpl := s.Store.Templates()
	tid := idOrAlias
	if holder, _, err := s.Store.Names().Holder(ctx, idOrAlias); err == nil {
		tid = holder
	} else if !isNotFound(err) {
		return nil, err
	}
	def, err := tpl.GetDefinition(ctx, tid)
	if isNotFound(err) && tid == idOrAlias && core.ValidateAlias(idOrAlias) == nil {
		// A row from before the namespace existed.
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
			// Callers create sandboxes from the stored request: it needs
			// its download token, which the row does not keep.
			out := *def
			out.RequestJSON = s.storedRequestWithTokens(ctx, def.RequestJSON)
			return &out, nil
		}
	}
	return nil, fmt.Errorf("template %s has no READY replica on a healthy node: %w", def.TemplateID, core.ErrTemplateNotReady)
}

// SetAlias sets or clears (nil, "") a template's alias. An alias that is
// another template's id or alias is refused with a *core.NameTakenError
// (core.ErrConflict) naming the holder; the name, the old alias's release
// and the definition are written in one transaction.
func (s *Service) SetAlias(ctx context.Context, templateID string, alias *string) (*core.Definition, error) {
	if err := core.ValidateTemplateID(templateID); err != nil {
		return nil, err
	}
	a, err := core.NormalizeAlias(alias)
	if err != nil {
		return nil, err
	}
	var def *core.Definition
	err = s.Store.Tx(ctx, func(ctx context.Context, r ports.Repos) error {
		if _, err := r.Names().Release(ctx, templateID, core.NameAlias); err != nil {
			return err
		}
		if a != "" {
			if err := r.Names().Claim(ctx, a, templateID, core.NameAlias); err != nil {
				return err
			}
		}
		var err error
		def, err = r.Templates().UpdateDefinition(ctx, templateID, func(d *core.Definition) error {
			d.Alias = a
			return nil
		})
		return err
	})
	var taken *core.NameTakenError
	switch {
	case errors.As(err, &taken):
		return nil, fmt.Errorf("alias %q: %w", a, taken)
	case errors.Is(err, core.ErrConflict):
		return nil, fmt.Errorf("alias %q is already used by template %s: %w", a, s.aliasHolder(ctx, a), core.ErrConflict)
	case err != nil:
		return nil, err
	}
	return def, nil
}

// checkAliasFree refuses an alias held by another template (as its id or
// alias) before any work starts; the submit claims it for good.
func (s *Service) checkAliasFree(ctx context.Context, templateID, alias string) error {
	if alias == "" {
		return nil
	}
	holder, kind, err := s.Store.Names().Holder(ctx, alias)
	switch {
	case isNotFound(err):
		return nil
	case err != nil:
		return err
	case holder != templateID || kind != core.NameAlias:
		return fmt.Errorf("alias %q: %w", alias, &core.NameTakenError{Name: alias, Holder: holder, HolderKind: kind})
	}
	return nil
}

func (s *Service) aliasHolder(ctx context.Context, alias string) string {
	if h, _, err := s.Store.Names().Holder(ctx, alias); err == nil {
		return h
	}
	if h, err := s.Store.Templates().GetDefinitionByAlias(ctx, alias); err == nil {
		return h.TemplateID
	}
	return "another template"
}
