package cubeapi

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/cubeview"
	"github.com/cubesandbox/templatecenter/adapters/store/memstore"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
	"github.com/cubesandbox/templatecenter/ports"
)

// listingServices adds a job listing to the fake services.
type listingServices struct {
	*services
	got control.JobQuery
}

func (l *listingServices) ListJobs(_ context.Context, q control.JobQuery) ([]*core.Job, error) {
	l.got = q
	return []*core.Job{{JobID: "job-2", TemplateID: "tpl-a", Status: core.JobRunning, Phase: core.PhasePulling,
		Pull: core.PullProgress{TotalBytes: 100, DownloadedBytes: 40}, UpdatedAt: time.Unix(100, 0)}}, nil
}

func TestConsoleReadRoutes(t *testing.T) {
	svc := &listingServices{services: &services{}}
	cfg := newServerConfig()
	cfg.Jobs, cfg.Catalog = svc, svc
	jl := memstore.NewJobLog()
	if err := jl.Append(context.Background(), []ports.JobLogLine{{JobID: "job-2", Time: time.Unix(100, 0), Level: "WARN", Source: "templatecenter", Message: "<b>x</b>"}}); err != nil {
		t.Fatal(err)
	}
	cfg.JobLog = jl
	cfg.Nodes = func(context.Context) ([]cubeview.NodeInfo, error) {
		return []cubeview.NodeInfo{{NodeID: "node-1", Healthy: true, TemplatesHeld: 2, BytesUsed: 10}}, nil
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		target   string
		wantCode int
		want     string // in the body
	}{
		{"/cube/template/jobs?unfinished=1&limit=5", 200, `"pull_downloaded_bytes":40`},
		{"/cube/template/jobs?limit=0", 130400, "limit"},
		{"/cube/template/jobs?unfinished=maybe", 130400, "unfinished"},
		{"/cube/template/jobs/log?job_id=job-2", 200, `"message":"\u003cb\u003ex\u003c/b\u003e"`},
		{"/cube/template/jobs/log?job_id=job-none", 200, `"lines":[]`},
		{"/cube/template/jobs/log", 130400, "job_id"},
		{"/cube/node", 200, `"templates_held":2`},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			rec := do(h, "GET", tt.target, "", nil)
			if got := retCode(t, rec); got != tt.wantCode {
				t.Fatalf("ret_code %d, want %d: %s", got, tt.wantCode, rec.Body)
			}
			if !strings.Contains(rec.Body.String(), tt.want) {
				t.Errorf("body lacks %s: %s", tt.want, rec.Body)
			}
		})
	}
	if svc.got != (control.JobQuery{Unfinished: true, Limit: 5}) {
		t.Errorf("query %+v", svc.got)
	}
	var list cubeview.BuildList
	if err := json.Unmarshal(do(h, "GET", "/cube/template/jobs", "", nil).Body.Bytes(), &list); err != nil || len(list.Data) != 1 || list.Data[0].UpdatedAt == "" {
		t.Errorf("list %+v %v", list, err)
	}
}

// Without the services, the routes say so rather than answer empty.
func TestConsoleReadRoutesOff(t *testing.T) {
	h := newServer(t, nil, "")
	for _, target := range []string{"/cube/template/jobs", "/cube/template/jobs/log?job_id=j", "/cube/node"} {
		if got := retCode(t, do(h, "GET", target, "", nil)); got != 130593 {
			t.Errorf("%s: ret_code %d", target, got)
		}
	}
}
