package memstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cubesandbox/templatecenter/core"
)

type artifactRepo struct{ sc scope }

// checkArtifact refuses what the SQL store refuses: a missing id or
// fingerprint, an unknown status.
func checkArtifact(a *core.Artifact) error {
	if err := required("artifact_id", a.ArtifactID); err != nil {
		return err
	}
	if err := required("template_spec_fingerprint", a.Fingerprint); err != nil {
		return err
	}
	_, err := core.ParseArtifactStatus(string(a.Status))
	return err
}

// fingerprintClash reports another artifact (any but self) with a's
// fingerprint.
func (st *state) fingerprintClash(a *core.Artifact, self string) error {
	for id, row := range st.artifacts {
		if id != self && row.a.Fingerprint == a.Fingerprint {
			return fmt.Errorf("fingerprint %s is artifact %s: %w", a.Fingerprint, id, core.ErrConflict)
		}
	}
	return nil
}

// find returns a copy of the first artifact ok accepts.
func (r artifactRepo) find(ctx context.Context, what string, ok func(a *core.Artifact) bool) (*core.Artifact, error) {
	var out *core.Artifact
	err := r.sc.view(ctx, func(st *state) {
		for _, row := range st.artifacts {
			if ok(&row.a) {
				out = &row.a
				return
			}
		}
	})
	switch {
	case err != nil:
		return nil, err
	case out == nil:
		return nil, fmt.Errorf("%s: %w", what, core.ErrNotFound)
	}
	return out, nil
}

func (r artifactRepo) Get(ctx context.Context, artifactID string) (*core.Artifact, error) {
	var out *core.Artifact
	err := r.sc.view(ctx, func(st *state) {
		if row, ok := st.artifacts[artifactID]; ok {
			out = &row.a
		}
	})
	switch {
	case err != nil:
		return nil, err
	case out == nil:
		return nil, fmt.Errorf("artifact %s: %w", artifactID, core.ErrNotFound)
	}
	return out, nil
}

func (r artifactRepo) GetByFingerprint(ctx context.Context, fingerprint string) (*core.Artifact, error) {
	return r.find(ctx, "artifact with fingerprint "+fingerprint, func(a *core.Artifact) bool { return a.Fingerprint == fingerprint })
}

func (r artifactRepo) Create(ctx context.Context, a *core.Artifact) error {
	if a == nil {
		return fmt.Errorf("create artifact: %w", core.ErrInvalidArgument)
	}
	what := "create artifact " + a.ArtifactID
	if err := checkArtifact(a); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	row := *a
	err := r.sc.write(ctx, func(st *state) error {
		if _, ok := st.artifacts[row.ArtifactID]; ok {
			return fmt.Errorf("artifact id is taken: %w", core.ErrConflict)
		}
		if err := st.fingerprintClash(&row, ""); err != nil {
			return err
		}
		row.CreatedAt = r.sc.s.now()
		row.UpdatedAt = row.CreatedAt
		seq := st.nextRev()
		st.artifacts[row.ArtifactID] = artifactRow{a: row, seq: seq, rev: seq}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	a.CreatedAt, a.UpdatedAt = row.CreatedAt, row.UpdatedAt
	return nil
}

// Update is optimistic like the job Update: fn may run more than once when
// another writer changes the row meanwhile, and runs with no lock held.
func (r artifactRepo) Update(ctx context.Context, artifactID string, fn func(*core.Artifact) error) (*core.Artifact, error) {
	what := "update artifact " + artifactID
	return update(ctx, r.sc, what,
		func(st *state) (*core.Artifact, uint64, bool) {
			row, ok := st.artifacts[artifactID]
			return &row.a, row.rev, ok
		},
		func(cur *core.Artifact) (*core.Artifact, error) {
			next := *cur
			if err := fn(&next); err != nil {
				return nil, err
			}
			next.ArtifactID, next.CreatedAt = cur.ArtifactID, cur.CreatedAt
			if err := checkArtifact(&next); err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			return &next, nil
		},
		func(st *state, cur, next *core.Artifact) error {
			if err := st.fingerprintClash(next, artifactID); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			next.UpdatedAt = r.sc.s.after(cur.UpdatedAt)
			row := st.artifacts[artifactID]
			st.artifacts[artifactID] = artifactRow{a: *next, seq: row.seq, rev: st.nextRev()}
			return nil
		})
}

func (r artifactRepo) Delete(ctx context.Context, artifactID string) error {
	return r.sc.write(ctx, func(st *state) error {
		delete(st.artifacts, artifactID)
		return nil
	})
}

func (r artifactRepo) ListByStatus(ctx context.Context, status core.ArtifactStatus, updatedBefore time.Time, limit int) ([]*core.Artifact, error) {
	var rows []artifactRow
	err := r.sc.view(ctx, func(st *state) {
		for _, row := range st.artifacts {
			if row.a.Status == status && (updatedBefore.IsZero() || row.a.UpdatedAt.Before(updatedBefore)) {
				rows = append(rows, row)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(rows, func(a, b artifactRow) int {
		return cmp.Or(a.a.UpdatedAt.Compare(b.a.UpdatedAt), cmp.Compare(a.seq, b.seq))
	})
	if limit > 0 && len(rows) > limit {
		rows = rows[:limit]
	}
	out := make([]*core.Artifact, len(rows))
	for i := range rows {
		out[i] = &rows[i].a
	}
	return out, nil
}

// CountReferences counts, as the SQL store does, replicas bound to the
// artifact, unfinished jobs naming it (core.UnfinishedJobStatuses) and
// definitions whose rootfs it is, leaving out rows of
// excludeTemplateID when it is not empty. Ids compare byte for byte; an
// empty artifactID counts the rows that name no artifact.
func (r artifactRepo) CountReferences(ctx context.Context, artifactID, excludeTemplateID string) (int, error) {
	counted := func(templateID string) bool { return excludeTemplateID == "" || templateID != excludeTemplateID }
	n := 0
	err := r.sc.view(ctx, func(st *state) {
		for _, rp := range st.replicas {
			if rp.ArtifactID == artifactID && counted(rp.TemplateID) {
				n++
			}
		}
		for _, row := range st.jobs {
			if j := row.job; j.ArtifactID == artifactID && j.Status.Unfinished() && counted(j.TemplateID) {
				n++
			}
		}
		for _, row := range st.defs {
			if row.def.RootfsArtifactID == artifactID && counted(row.def.TemplateID) {
				n++
			}
		}
	})
	return n, err
}
