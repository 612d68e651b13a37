package cubeapi

import (
	"strings"
	"testing"
)

// TestPlacementRoutes: the policy reads and replaces through the
// envelope, a bad policy is refused naming its field, and a template's
// decisions come back by id or alias (none is an empty list).
func TestPlacementRoutes(t *testing.T) {
	svc := &services{}
	h := newServer(t, svc, "")
	cases := []struct {
		method, target, body string
		wantCode             int
		wantBody             []string
	}{
		{"GET", PathPlacementPolicy, "", 200, []string{`"source":"file"`, `"per_node_max_templates":3`}},
		{"PUT", PathPlacementPolicy, `{"pinned_templates":[{"template_id":"web","min_replicas":2,"node_selector":{"zone":"a"}}],"per_node_max_bytes":1024}`, 200,
			[]string{`"source":"api"`, `"set_at":"2023-11-14T22:13:20Z"`, `"template_id":"web"`, `"per_node_max_bytes":1024`}},
		{"PUT", PathPlacementPolicy, `{"per_node_max_bytes":-1}`, 130400, []string{"per_node_max_bytes"}},
		{"PUT", PathPlacementPolicy, `{"pinned_templates":[{"template_id":"a","min_replicas":3,"max_replicas":1}]}`, 130400, []string{"pinned_templates[0].max_replicas"}},
		{"GET", "/cube/template/tpl-1/placement", "", 200, []string{`"template_id":"tpl-1"`, `"decision":"evict"`, `"reason":"node_over_budget"`}},
		// None yet is an empty list, never null: the console shows it as such.
		{"GET", "/cube/template/tpl-undecided/placement", "", 200, []string{`"template_id":"tpl-undecided"`, `"decisions":[]`}},
	}
	for _, c := range cases {
		rec := do(h, c.method, c.target, c.body, nil)
		if code := retCode(t, rec); code != c.wantCode {
			t.Errorf("%s %s %s: ret_code %d, want %d: %s", c.method, c.target, c.body, code, c.wantCode, rec.Body.String())
		}
		for _, want := range c.wantBody {
			if !strings.Contains(rec.Body.String(), want) {
				t.Errorf("%s %s: body %s lacks %s", c.method, c.target, rec.Body.String(), want)
			}
		}
	}
}
