package entstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ent"
	"github.com/cubesandbox/templatecenter/ent/templatename"
)

type nameRepo struct{ sc scope }

func (r nameRepo) Claim(ctx context.Context, name, templateID string, kind core.NameKind) error {
	switch {
	case strings.TrimSpace(name) == "":
		return fmt.Errorf("claim name: %w", &core.FieldError{Field: "name", Reason: "is required"})
	case strings.TrimSpace(templateID) == "":
		return fmt.Errorf("claim name %q: %w", name, &core.FieldError{Field: "template_id", Reason: "is required"})
	case kind != core.NameID && kind != core.NameAlias:
		return fmt.Errorf("claim name %q: %w", name, &core.FieldError{Field: "kind", Reason: fmt.Sprintf("%q is neither id nor alias", kind)})
	}
	var taken error
	err := r.sc.do(ctx, func(c *ent.Client) error {
		taken = nil
		e, err := c.TemplateName.Query().Where(templatename.Name(name)).Only(ctx)
		switch {
		case err == nil:
			if e.TemplateID != templateID || core.NameKind(e.Kind) != kind {
				taken = &core.NameTakenError{Name: name, Holder: e.TemplateID, HolderKind: core.NameKind(e.Kind)}
			}
			return nil
		case !ent.IsNotFound(err):
			return err
		}
		return c.TemplateName.Create().SetName(name).SetTemplateID(templateID).SetKind(string(kind)).SetCreatedAt(r.sc.s.now()).Exec(ctx)
	})
	if taken != nil {
		return fmt.Errorf("claim name %q for %s: %w", name, templateID, taken)
	}
	if err != nil && isUnique(err) {
		// Claimed by another writer between the read and the insert.
		if !r.sc.tx {
			if holder, k, herr := r.Holder(ctx, name); herr == nil {
				if holder == templateID && k == kind {
					return nil
				}
				return fmt.Errorf("claim name %q for %s: %w", name, templateID, &core.NameTakenError{Name: name, Holder: holder, HolderKind: k})
			}
		}
		return fmt.Errorf("claim name %q for %s: %w", name, templateID, &core.NameTakenError{Name: name, Holder: "another template", HolderKind: kind})
	}
	return mapErr(err, fmt.Sprintf("claim name %q for %s", name, templateID))
}

func (r nameRepo) Holder(ctx context.Context, name string) (string, core.NameKind, error) {
	var tid, kind string
	err := r.sc.do(ctx, func(c *ent.Client) error {
		e, err := c.TemplateName.Query().Where(templatename.Name(name)).Only(ctx)
		if err != nil {
			return err
		}
		tid, kind = e.TemplateID, e.Kind
		return nil
	})
	if err != nil {
		return "", "", mapErr(err, fmt.Sprintf("name %q", name))
	}
	return tid, core.NameKind(kind), nil
}

func (r nameRepo) Release(ctx context.Context, templateID string, kind core.NameKind) (int, error) {
	var n int
	err := r.sc.do(ctx, func(c *ent.Client) error {
		q := c.TemplateName.Delete().Where(templatename.TemplateID(templateID))
		if kind != "" {
			q = q.Where(templatename.Kind(string(kind)))
		}
		var err error
		n, err = q.Exec(ctx)
		return err
	})
	return n, mapErr(err, "release names of "+templateID)
}

func (r nameRepo) Move(ctx context.Context, alias, templateID string) (string, error) {
	switch {
	case strings.TrimSpace(alias) == "":
		return "", fmt.Errorf("move alias: %w", &core.FieldError{Field: "alias", Reason: "is required"})
	case strings.TrimSpace(templateID) == "":
		return "", fmt.Errorf("move alias %q: %w", alias, &core.FieldError{Field: "template_id", Reason: "is required"})
	}
	var from string
	var taken error
	// One transaction: the row is replaced (delete, insert) as a whole,
	// and locked first (FOR UPDATE outside SQLite) so that two moves of
	// one alias take turns.
	err := r.sc.inTx(ctx, func(sc scope) error {
		return sc.do(ctx, func(c *ent.Client) error { return r.move(ctx, sc, c, alias, templateID, &from, &taken) })
	})
	if taken != nil {
		return "", fmt.Errorf("move alias %q to %s: %w", alias, templateID, taken)
	}
	if err != nil && isUnique(err) {
		// Claimed by another writer between the read and the insert.
		return "", fmt.Errorf("move alias %q to %s: %w", alias, templateID, &core.NameTakenError{Name: alias, Holder: "another template", HolderKind: core.NameAlias})
	}
	if err != nil {
		return "", mapErr(err, fmt.Sprintf("move alias %q to %s", alias, templateID))
	}
	return from, nil
}

func (r nameRepo) move(ctx context.Context, sc scope, c *ent.Client, alias, templateID string, from *string, taken *error) error {
	*from, *taken = "", nil
	q := c.TemplateName.Query().Where(templatename.Name(alias))
	if sc.lockRows() {
		q = q.ForUpdate()
	}
	e, err := q.Only(ctx)
	switch {
	case ent.IsNotFound(err):
		return c.TemplateName.Create().SetName(alias).SetTemplateID(templateID).SetKind(string(core.NameAlias)).
			SetCreatedAt(r.sc.s.now()).Exec(ctx)
	case err != nil:
		return err
	case core.NameKind(e.Kind) != core.NameAlias:
		*taken = &core.NameTakenError{Name: alias, Holder: e.TemplateID, HolderKind: core.NameKind(e.Kind)}
		return nil
	case e.TemplateID == templateID:
		return nil
	}
	// template_id is immutable: the row is replaced, its created_at
	// becoming the time of the move.
	if err := c.TemplateName.DeleteOneID(e.ID).Exec(ctx); err != nil {
		return err
	}
	*from = e.TemplateID
	return c.TemplateName.Create().SetName(alias).SetTemplateID(templateID).SetKind(string(core.NameAlias)).
		SetPreviousTemplateID(*from).SetCreatedAt(r.sc.s.now()).Exec(ctx)
}

func (r nameRepo) Previous(ctx context.Context, name string) (string, error) {
	var prev string
	err := r.sc.do(ctx, func(c *ent.Client) error {
		e, err := c.TemplateName.Query().Where(templatename.Name(name)).Only(ctx)
		if err != nil {
			return err
		}
		prev = e.PreviousTemplateID
		return nil
	})
	if err != nil {
		return "", mapErr(err, fmt.Sprintf("name %q", name))
	}
	return prev, nil
}
