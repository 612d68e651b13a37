package main

import (
	"context"
	"io"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/cubeapi"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/tcclient"
	"github.com/cubesandbox/templatecenter/core/control"
	"github.com/cubesandbox/templatecenter/ports"
)

// migrations serves migrate (tpl merge) jobs.
type migrations struct{ svc *control.Service }

func (m migrations) Migrate(ctx context.Context, req cubeapi.MigrateRequest) (*cubeapi.JobView, error) {
	job, err := m.svc.Migrate(ctx, control.MigrateRequest{RequestID: req.RequestID, TemplateID: req.TemplateID})
	if err != nil {
		return nil, err
	}
	return imageJobs(m).view(ctx, job)
}

func (m migrations) GetMigrateJob(ctx context.Context, jobID string) (*cubeapi.JobView, error) {
	job, err := m.svc.GetMigrateJob(ctx, jobID)
	if err != nil {
		return nil, err
	}
	return imageJobs(m).view(ctx, job)
}

// tcUploader adapts the data plane client to control.ArtifactUploader.
type tcUploader struct{ c *tcclient.Client }

func (u tcUploader) UploadArtifact(ctx context.Context, artifactID string, body io.Reader, info ports.ObjectInfo) (string, string, error) {
	resp, err := u.c.UploadArtifact(ctx, artifactID, body, info)
	if err != nil {
		return "", "", err
	}
	return resp.ObjectKey, resp.StorageBackend, nil
}
