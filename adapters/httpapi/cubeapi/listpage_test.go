package cubeapi

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core/control"
)

// manyTemplates lists five templates: tpl-0..tpl-4, READY but tpl-3
// (FAILED), tpl-1 aliased "web", each with a latest job ready on one of
// its two nodes.
type manyTemplates struct{ services }

func (m *manyTemplates) ListTemplates(context.Context) ([]control.Template, error) {
	var out []control.Template
	for i := range 5 {
		t := control.Template{TemplateID: fmt.Sprintf("tpl-%d", i), Status: "READY", ImageInfo: "nginx:1", JobID: fmt.Sprintf("job-%d", i),
			ReadyNodes: 1, TargetNodes: 2}
		if i == 1 {
			t.Alias = "web"
		}
		if i == 3 {
			t.Status = "FAILED"
		}
		out = append(out, t)
	}
	return out, nil
}

func TestListPaging(t *testing.T) {
	tests := []struct {
		query     string
		wantIDs   string
		wantTotal int // -1: no total in the answer
		wantCode  int
	}{
		{query: "", wantIDs: "tpl-0 tpl-1 tpl-2 tpl-3 tpl-4", wantTotal: -1},
		{query: "?limit=2", wantIDs: "tpl-0 tpl-1", wantTotal: 5},
		{query: "?limit=2&offset=2", wantIDs: "tpl-2 tpl-3", wantTotal: 5},
		{query: "?offset=4", wantIDs: "tpl-4", wantTotal: 5},
		{query: "?offset=9", wantIDs: "", wantTotal: 5},
		{query: "?status=failed", wantIDs: "tpl-3", wantTotal: 1},
		{query: "?status=READY&limit=1&offset=1", wantIDs: "tpl-1", wantTotal: 4},
		{query: "?q=WEB", wantIDs: "tpl-1", wantTotal: 1},
		{query: "?q=tpl-4", wantIDs: "tpl-4", wantTotal: 1},
		{query: "?q=nginx&status=FAILED", wantIDs: "tpl-3", wantTotal: 1},
		{query: "?limit=0", wantCode: 130400},
		{query: "?limit=1001", wantCode: 130400},
		{query: "?limit=x", wantCode: 130400},
		{query: "?offset=-1", wantCode: 130400},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			svc := &manyTemplates{}
			cfg := newServerConfig()
			cfg.Catalog = svc
			h, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			rec := do(h, "GET", PathTemplate+tt.query, "", nil)
			if tt.wantCode != 0 {
				if got := retCode(t, rec); got != tt.wantCode {
					t.Fatalf("ret_code %d, want %d: %s", got, tt.wantCode, rec.Body.String())
				}
				if msg := rec.Body.String(); !strings.Contains(msg, "limit") && !strings.Contains(msg, "offset") {
					t.Fatalf("message names no field: %s", msg)
				}
				return
			}
			b := decodeMap(t, rec.Body.Bytes())
			var ids []string
			for _, it := range b["data"].([]any) {
				m := it.(map[string]any)
				ids = append(ids, m["template_id"].(string))
				if m["replicas_ready"].(float64) != 1 || m["replicas_total"].(float64) != 2 || m["last_job_id"] == "" {
					t.Fatalf("item %v", m)
				}
			}
			if got := strings.Join(ids, " "); got != tt.wantIDs {
				t.Fatalf("ids %q, want %q", got, tt.wantIDs)
			}
			total, has := b["total"]
			switch {
			case tt.wantTotal < 0 && has:
				t.Fatalf("unpaged listing has total %v", total)
			case tt.wantTotal >= 0 && (!has || total.(float64) != float64(tt.wantTotal)):
				t.Fatalf("total %v, want %d", total, tt.wantTotal)
			}
		})
	}
}
