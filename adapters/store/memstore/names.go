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
