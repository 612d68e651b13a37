package main

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/cubeapi"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
)

// The cubeapi router asks for small interfaces; these types adapt the
// template service to them. control.Service already satisfies
// cubeapi.StatusReports and cubeapi.Artifacts as it is.
var (
	_ cubeapi.StatusReports = (*control.Service)(nil)
	_ cubeapi.Artifacts     = (*control.Service)(nil)
	_ cubeapi.ImageJobs     = imageJobs{}
	_ cubeapi.Catalog       = catalog{}
	_ cubeapi.Migrations    = migrations{}
)

// imageJobs serves create-from-image, redo and job reads.
type imageJobs struct{ svc *control.Service }

func (a imageJobs) CreateFromImage(ctx context.Context, req *core.FromImageRequest, baseURL string) (*cubeapi.JobView, error) {
	job, err := a.svc.CreateFromImage(ctx, req, baseURL)
	if err != nil {
		return nil, err
	}
	return a.view(ctx, job)
}

// GetImageJob returns the job with its artifact and, while the job is
// active, the live pull counters from the progress sink.
func (a imageJobs) GetImageJob(ctx context.Context, jobID string) (*cubeapi.JobView, error) {
	job, err := a.svc.GetJob(ctx, jobID)
	if err != nil {
		return nil, err
	}
	if a.svc.Progress != nil && job.Status.Active() {
		if live, ok, err := a.svc.Progress.Get(ctx, jobID); err == nil && ok && live.Pull.TotalBytes > 0 {
			job.Pull = live.Pull
		}
	}
	return a.view(ctx, job)
}

func (a imageJobs) Redo(ctx context.Context, req cubeapi.RedoRequest, baseURL string) (*cubeapi.JobView, error) {
	job, err := a.svc.Redo(ctx, control.RedoRequest{
		RequestID: req.RequestID, TemplateID: req.TemplateID, DistributionScope: req.DistributionScope,
		FailedOnly: req.FailedOnly, DownloadBaseURL: baseURL,
	})
	if err != nil {
		return nil, err
	}
	return a.view(ctx, job)
}

func (a imageJobs) BuildStatus(ctx context.Context, buildID string) (*core.Job, error) {
	return a.svc.GetJob(ctx, buildID)
}

// view adds the job's artifact row, if it has one.
func (a imageJobs) view(ctx context.Context, job *core.Job) (*cubeapi.JobView, error) {
	v := &cubeapi.JobView{Job: job}
	if job.ArtifactID == "" {
		return v, nil
	}
	art, err := a.svc.GetArtifact(ctx, job.ArtifactID)
	switch {
	case err == nil:
		v.Artifact = art
	case !errors.Is(err, core.ErrNotFound):
		return nil, err
	}
	return v, nil
}

// catalog serves template reads, deletion and aliases.
type catalog struct{ svc *control.Service }

func (c catalog) ListTemplates(ctx context.Context) ([]cubeapi.TemplateSummary, error) {
	list, err := c.svc.ListTemplates(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]cubeapi.TemplateSummary, 0, len(list))
	for i := range list {
		out = append(out, summary(&list[i]))
	}
	return out, nil
}

func (c catalog) GetTemplate(ctx context.Context, templateID string, includeRequest bool) (*cubeapi.TemplateDetail, error) {
	info, err := c.svc.GetTemplate(ctx, templateID)
	if err != nil {
		return nil, err
	}
	d := detail(info)
	if includeRequest {
		d.CreateRequest = string(info.CreateRequest)
	}
	return d, nil
}

// CreateTemplate creates a template from a sandbox create request,
// synchronously (POST /cube/template).
func (c catalog) CreateTemplate(ctx context.Context, body json.RawMessage) (*cubeapi.TemplateDetail, error) {
	req, err := control.ParseCreateTemplateRequest(body)
	if err != nil {
		return nil, err
	}
	info, err := c.svc.CreateTemplate(ctx, req)
	if err != nil {
		return nil, err
	}
	return detail(info), nil
}

func detail(info *control.TemplateInfo) *cubeapi.TemplateDetail {
	d := &cubeapi.TemplateDetail{TemplateSummary: summary(info)}
	for _, r := range info.Replicas {
		d.Replicas = append(d.Replicas, &core.Replica{
			TemplateID: info.TemplateID, NodeID: r.NodeID, NodeIP: r.NodeIP, InstanceType: r.InstanceType,
			Spec: r.Spec, SnapshotPath: r.SnapshotPath, Status: core.ReplicaStatus(r.Status),
			Phase: core.ReplicaPhase(r.Phase), ArtifactID: r.ArtifactID, LastJobID: r.LastJobID,
			LastErrorPhase: r.LastErrorPhase, CleanupRequired: r.CleanupRequired, ErrorMessage: r.ErrorMessage,
		})
	}
	return d
}

func (c catalog) DeleteTemplate(ctx context.Context, req cubeapi.DeleteRequest) error {
	return c.svc.Delete(ctx, req.TemplateID, req.InstanceType)
}

func (c catalog) SetAlias(ctx context.Context, templateID, alias string) error {
	_, err := c.svc.SetAlias(ctx, templateID, &alias)
	return err
}

// ResolveTemplate resolves an id or alias the way sandbox create does.
func (c catalog) ResolveTemplate(ctx context.Context, idOrAlias string) (*cubeapi.ResolvedTemplate, error) {
	def, err := c.svc.ResolveTemplate(ctx, idOrAlias)
	if err != nil {
		return nil, err
	}
	return &cubeapi.ResolvedTemplate{TemplateID: def.TemplateID, Alias: def.Alias, Status: string(def.Status),
		CreateRequest: def.RequestJSON}, nil
}

func summary(t *control.TemplateInfo) cubeapi.TemplateSummary {
	s := cubeapi.TemplateSummary{
		TemplateID: t.TemplateID, InstanceType: t.InstanceType, Version: t.Version, Status: t.Status,
		LastError: t.LastError, Alias: t.Alias, ImageInfo: t.ImageInfo,
	}
	// The service formats RFC 3339; the router formats again.
	if ts, err := time.Parse(time.RFC3339, t.CreatedAt); err == nil {
		s.CreatedAt = ts
	}
	return s
}
