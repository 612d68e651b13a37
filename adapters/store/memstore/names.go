package memstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/cubesandbox/templatecenter/core"
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
	return r.sc.write(ctx, func(st *state) error {
		if cur, ok := st.names[name]; ok {
			if cur.templateID == templateID && cur.kind == kind {
				return nil
			}
			return fmt.Errorf("claim name %q for %s: %w", name, templateID, &core.NameTakenError{Name: name, Holder: cur.templateID, HolderKind: cur.kind})
		}
		st.names[name] = nameRow{templateID: templateID, kind: kind}
		return nil
	})
}

func (r nameRepo) Holder(ctx context.Context, name string) (string, core.NameKind, error) {
	var row nameRow
	var ok bool
	if err := r.sc.view(ctx, func(st *state) { row, ok = st.names[name] }); err != nil {
		return "", "", err
	}
	if !ok {
		return "", "", fmt.Errorf("name %q: %w", name, core.ErrNotFound)
	}
	return row.templateID, row.kind, nil
}

func (r nameRepo) Release(ctx context.Context, templateID string, kind core.NameKind) (int, error) {
	n := 0
	err := r.sc.write(ctx, func(st *state) error {
		for name, row := range st.names {
			if row.templateID == templateID && (kind == "" || row.kind == kind) {
				delete(st.names, name)
				n++
			}
		}
		return nil
	})
	return n, err
}

func (r nameRepo) Move(ctx context.Context, alias, templateID string) (string, error) {
	switch {
	case strings.TrimSpace(alias) == "":
		return "", fmt.Errorf("move alias: %w", &core.FieldError{Field: "alias", Reason: "is required"})
	case strings.TrimSpace(templateID) == "":
		return "", fmt.Errorf("move alias %q: %w", alias, &core.FieldError{Field: "template_id", Reason: "is required"})
	}
	from := ""
	err := r.sc.write(ctx, func(st *state) error {
		from = ""
		cur, ok := st.names[alias]
		switch {
		case !ok:
			st.names[alias] = nameRow{templateID: templateID, kind: core.NameAlias}
		case cur.kind != core.NameAlias:
			return fmt.Errorf("move alias %q to %s: %w", alias, templateID, &core.NameTakenError{Name: alias, Holder: cur.templateID, HolderKind: cur.kind})
		case cur.templateID != templateID:
			from = cur.templateID
			st.names[alias] = nameRow{templateID: templateID, kind: core.NameAlias, previous: from}
		}
		return nil
	})
	return from, err
}

func (r nameRepo) Previous(ctx context.Context, name string) (string, error) {
	var row nameRow
	var ok bool
	if err := r.sc.view(ctx, func(st *state) { row, ok = st.names[name] }); err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("name %q: %w", name, core.ErrNotFound)
	}
	return row.previous, nil
}
