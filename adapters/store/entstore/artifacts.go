package entstore

import (
	"context"
	"fmt"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ent"
	"github.com/cubesandbox/templatecenter/ent/predicate"
	"github.com/cubesandbox/templatecenter/ent/rootfsartifact"
	"github.com/cubesandbox/templatecenter/ent/templatedefinition"
	tij "github.com/cubesandbox/templatecenter/ent/templateimagejob"
	"github.com/cubesandbox/templatecenter/ent/templatereplica"
)

type artifactRepo struct{ sc scope }

func (r artifactRepo) one(ctx context.Context, sc scope, what string, lock bool, p predicate.RootfsArtifact) (*ent.RootfsArtifact, *core.Artifact, error) {
	var row *ent.RootfsArtifact
	var out *core.Artifact
	err := sc.do(ctx, func(c *ent.Client) error {
		q := c.RootfsArtifact.Query().Where(p)
		if lock {
			q = q.ForUpdate()
		}
		var err error
		if row, err = q.Only(ctx); err != nil {
			return err
		}
		out, err = artifactFromEnt(row)
		return err
	})
	if err != nil {
		return nil, nil, mapErr(err, what)
	}
	return row, out, nil
}

func (r artifactRepo) Get(ctx context.Context, artifactID string) (*core.Artifact, error) {
	_, a, err := r.one(ctx, r.sc, "artifact "+artifactID, false, rootfsartifact.ArtifactID(artifactID))
	return a, err
}

func (r artifactRepo) GetByFingerprint(ctx context.Context, fingerprint string) (*core.Artifact, error) {
	_, a, err := r.one(ctx, r.sc, "artifact with fingerprint "+fingerprint, false, rootfsartifact.TemplateSpecFingerprint(fingerprint))
	return a, err
}

func (r artifactRepo) Create(ctx context.Context, a *core.Artifact) error {
	if a == nil {
		return fmt.Errorf("create artifact: %w", core.ErrInvalidArgument)
	}
	if _, err := core.ParseArtifactStatus(string(a.Status)); err != nil {
		return fmt.Errorf("create artifact %s: %w", a.ArtifactID, err)
	}
	t := r.sc.s.now()
	row := *a
	row.CreatedAt, row.UpdatedAt = t, t
	err := r.sc.do(ctx, func(c *ent.Client) error {
		if err := r.sc.purgeSoftDeleted(ctx, c, "t_cube_rootfs_artifact", "artifact_id = ? OR template_spec_fingerprint = ?", a.ArtifactID, a.Fingerprint); err != nil {
			return err
		}
		b := c.RootfsArtifact.Create().SetArtifactID(a.ArtifactID).SetCreatedAt(t)
		setArtifact(b.Mutation(), &row)
		return b.Exec(ctx)
	})
	if err != nil {
		return mapErr(err, "create artifact "+a.ArtifactID)
	}
	a.CreatedAt, a.UpdatedAt = t, t
	return nil
}

func (r artifactRepo) Update(ctx context.Context, artifactID string, fn func(*core.Artifact) error) (*core.Artifact, error) {
	var out *core.Artifact
	err := r.sc.inTx(ctx, func(sc scope) error {
		row, cur, err := r.one(ctx, sc, "artifact "+artifactID, sc.lockRows(), rootfsartifact.ArtifactID(artifactID))
		if err != nil {
			return err
		}
		next := *cur
		if err := fn(&next); err != nil {
			return err
		}
		if _, err := core.ParseArtifactStatus(string(next.Status)); err != nil {
			return fmt.Errorf("update artifact %s: %w", artifactID, err)
		}
		next.ArtifactID, next.CreatedAt = cur.ArtifactID, cur.CreatedAt
		next.UpdatedAt = r.sc.s.after(cur.UpdatedAt)
		u := sc.c.RootfsArtifact.UpdateOneID(row.ID)
		setArtifact(u.Mutation(), &next)
		if err := u.Exec(ctx); err != nil {
			return mapErr(err, "update artifact "+artifactID)
		}
		out = &next
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (r artifactRepo) Delete(ctx context.Context, artifactID string) error {
	err := r.sc.do(ctx, func(c *ent.Client) error {
		_, err := c.RootfsArtifact.Delete().Where(rootfsartifact.ArtifactID(artifactID)).Exec(ctx)
		return err
	})
	return mapErr(err, "delete artifact "+artifactID)
}

func (r artifactRepo) ListByStatus(ctx context.Context, status core.ArtifactStatus, updatedBefore time.Time, limit int) ([]*core.Artifact, error) {
	var out []*core.Artifact
	err := r.sc.do(ctx, func(c *ent.Client) error {
		q := c.RootfsArtifact.Query().Where(rootfsartifact.Status(string(status)))
		if !updatedBefore.IsZero() {
			q = q.Where(rootfsartifact.UpdatedAtLT(updatedBefore.UTC()))
		}
		q = q.Order(ent.Asc(rootfsartifact.FieldUpdatedAt), ent.Asc(rootfsartifact.FieldID))
		if limit > 0 {
			q = q.Limit(limit)
		}
		es, err := q.All(ctx)
		if err != nil {
			return err
		}
		out = make([]*core.Artifact, 0, len(es))
		for _, e := range es {
			a, err := artifactFromEnt(e)
			if err != nil {
				return err
			}
			out = append(out, a)
		}
		return nil
	})
	return out, mapErr(err, "list artifacts "+string(status))
}

// CountReferences counts replicas bound to the artifact, unfinished jobs
// that name it (core.UnfinishedJobStatuses: a BUILT job's resume pipeline
// still distributes the artifact) and definitions whose rootfs it is,
// leaving out rows of excludeTemplateID.
func (r artifactRepo) CountReferences(ctx context.Context, artifactID, excludeTemplateID string) (int, error) {
	var total int
	err := r.sc.do(ctx, func(c *ent.Client) error {
		rq := c.TemplateReplica.Query().Where(templatereplica.ArtifactID(artifactID))
		jq := c.TemplateImageJob.Query().Where(tij.ArtifactID(artifactID),
			tij.StatusIn(strs(core.UnfinishedJobStatuses())...))
		dq := c.TemplateDefinition.Query().Where(templatedefinition.RootfsArtifactID(artifactID))
		if excludeTemplateID != "" {
			rq = rq.Where(templatereplica.TemplateIDNEQ(excludeTemplateID))
			jq = jq.Where(tij.TemplateIDNEQ(excludeTemplateID))
			dq = dq.Where(templatedefinition.TemplateIDNEQ(excludeTemplateID))
		}
		total = 0
		for _, count := range []func(context.Context) (int, error){rq.Count, jq.Count, dq.Count} {
			n, err := count(ctx)
			if err != nil {
				return err
			}
			total += n
		}
		return nil
	})
	return total, mapErr(err, "count references of artifact "+artifactID)
}
