package main

import (
	"context"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/cubeapi"
	"github.com/cubesandbox/templatecenter/core/control"
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
