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

// SetAlias sets, moves or clears (nil, "") a template's alias, as
// upstream's newest set-alias does:
//
//   - a free alias, or the template's own, is set (its other alias is
//     released);
//   - an alias another template holds moves here, but only to a READY
//     template (core.ErrTemplateNotReady, also core.ErrConflict as
//     upstream answers it, otherwise), so that resolution
//     never points at a template that cannot serve. The holder loses it in
//     the same transaction, and the name records the holder it came from
//     (Template.AliasMovedFrom): moving it back undoes the move;
//   - a name that is a template's id never becomes an alias: a
//     *core.NameTakenError (core.ErrConflict) naming the holder.
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
		var err error
		def, _, err = setAliasTx(ctx, r, templateID, a)
		return err
	})
	var taken *core.NameTakenError
	switch {
	case errors.As(err, &taken):
		return nil, fmt.Errorf("alias %q: %w", a, taken)
	case errors.Is(err, core.ErrTemplateNotReady):
		return nil, err
	case errors.Is(err, core.ErrConflict):
		return nil, fmt.Errorf("alias %q is already used by template %s: %w", a, s.aliasHolder(ctx, a), core.ErrConflict)
	case err != nil:
		return nil, err
	}
	return def, nil
}

// setAliasTx gives templateID the alias a ("" clears it) inside one
// transaction; from is the template a was moved away from.
func setAliasTx(ctx context.Context, r ports.Repos, templateID, a string) (def *core.Definition, from string, err error) {
	holder, kind, herr := r.Names().Holder(ctx, a)
	if a != "" && herr != nil && !isNotFound(herr) {
		return nil, "", herr
	}
	own := a != "" && herr == nil && holder == templateID && kind == core.NameAlias
	moving := a != "" && herr == nil && holder != templateID && kind == core.NameAlias
	if moving {
		cur, err := r.Templates().GetDefinition(ctx, templateID)
		if err != nil {
			return nil, "", err
		}
		if cur.Status != core.TemplateReady {
			// A conflict as upstream answers it (retry once READY).
			return nil, "", fmt.Errorf("alias %q is template %s's; it moves only to a READY template and %s is %s: %w (%w)",
				a, holder, templateID, cur.Status, core.ErrTemplateNotReady, core.ErrConflict)
		}
	}
	if !own {
		if _, err := r.Names().Release(ctx, templateID, core.NameAlias); err != nil {
			return nil, "", err
		}
	}
	switch {
	case moving:
		if from, err = r.Names().Move(ctx, a, templateID); err != nil {
			return nil, "", err
		}
		// The holder's definition lets go first: one alias, one row.
		if from != "" {
			if _, err := r.Templates().UpdateDefinition(ctx, from, func(d *core.Definition) error {
				d.Alias = ""
				return nil
			}); err != nil && !isNotFound(err) {
				return nil, "", err
			}
		}
	case a != "" && !own:
		if err := r.Names().Claim(ctx, a, templateID, core.NameAlias); err != nil {
			return nil, "", err
		}
	}
	def, err = r.Templates().UpdateDefinition(ctx, templateID, func(d *core.Definition) error {
		d.Alias = a
		return nil
	})
	return def, from, err
}

// moveCreateAlias runs when a create reaches its end state: the alias its
// request asked for, held by another template when it was submitted (so
// not applied, see ensureDefinition), moves here now, as upstream's newest
// master moves it once the new build is READY. Only a READY template
// takes it, and only from a template whose latest build is older than
// this job (a slower, older build never takes it back from a newer one).
// The note says what happened; it replaces ensureDefinition's.
func (s *Service) moveCreateAlias(ctx context.Context, job *core.Job, alias string, status core.TemplateStatus, note string) string {
	if alias == "" {
		return note
	}
	holder, kind, err := s.Store.Names().Holder(ctx, alias)
	switch {
	case err == nil && holder == job.TemplateID:
		return note // it is ours already
	case err == nil && kind != core.NameAlias:
		return note // another template's id: never an alias
	case err != nil && !isNotFound(err):
		return joinNonEmpty("; ", note, fmt.Sprintf("alias %q not applied: %v", alias, err))
	}
	if status != core.TemplateReady {
		return fmt.Sprintf("alias %q stays with template %s: it moves only to a READY template, this one is %s", alias, holder, status)
	}
	if holder != "" {
		if latest, err := s.Store.Jobs().Latest(ctx, holder); err == nil && latest.CreatedAt.After(job.CreatedAt) {
			return fmt.Sprintf("alias %q stays with template %s, whose latest build (%s) is newer than this one", alias, holder, latest.JobID)
		}
	}
	var from string
	err = s.Store.Tx(ctx, func(ctx context.Context, r ports.Repos) error {
		var err error
		_, from, err = setAliasTx(ctx, r, job.TemplateID, alias)
		return err
	})
	switch {
	case err != nil:
		return fmt.Sprintf("alias %q not applied: %v", alias, err)
	case from != "":
		s.log().Info("alias moved to a newer template", "alias", alias, "from", from, "to", job.TemplateID, "job", job.JobID)
		return fmt.Sprintf("alias %q moved here from template %s (to undo: set-alias %s --alias %s)", alias, from, from, alias)
	}
	return ""
}

// checkAliasFree refuses, before any work starts, an alias that is another
// template's id (never an alias). An alias another template holds is
// accepted: it moves to the new template once that is READY
// (moveCreateAlias).
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
	case kind != core.NameAlias:
		return fmt.Errorf("alias %q: %w", alias, &core.NameTakenError{Name: alias, Holder: holder, HolderKind: kind})
	}
	return nil
}

// claimAlias claims a create's alias at submit: a free one is the
// template's from now on; one another template holds as its alias is left
// to it until the new template is READY (moveCreateAlias); a template's id
// is refused (*core.NameTakenError).
func claimAlias(ctx context.Context, names ports.NameRepository, templateID, alias string) error {
	err := names.Claim(ctx, alias, templateID, core.NameAlias)
	var taken *core.NameTakenError
	if errors.As(err, &taken) && taken.HolderKind == core.NameAlias && taken.Holder != templateID {
		return nil
	}
	return err
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
