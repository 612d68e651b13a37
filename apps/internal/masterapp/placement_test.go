package masterapp

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadPlacementPolicy: the file holds the policy's keys (YAML or
// JSON) or upstream's template_preheat block; a bad one names its field.
func TestLoadPlacementPolicy(t *testing.T) {
	cases := []struct {
		name, body string
		wantNil    bool
		wantErr    string
		check      func(t *testing.T, pins, maxTemplates int, maxBytes int64)
	}{
		{name: "yaml", body: "per_node_max_templates: 40\npinned_templates:\n  - template_id: web\n    min_replicas: 2\n    node_selector: {zone: a}\n",
			check: func(t *testing.T, pins, mt int, _ int64) {
				if pins != 1 || mt != 40 {
					t.Errorf("pins %d, max templates %d", pins, mt)
				}
			}},
		{name: "json", body: `{"per_node_max_bytes": 1099511627776}`, check: func(t *testing.T, _, _ int, mb int64) {
			if mb != 1<<40 {
				t.Errorf("max bytes %d", mb)
			}
		}},
		{name: "upstream block", body: "common: {x: 1}\ntemplate_preheat:\n  enabled: true\n  download_base_url: http://m:8089\n  per_template_min_redo_interval: 10m\n  per_node_max_templates: 7\n  pinned_templates:\n    - {template_id: t1, priority: 10, min_replicas: 1, max_replicas: 3}\n",
			check: func(t *testing.T, pins, mt int, _ int64) {
				if pins != 1 || mt != 7 {
					t.Errorf("pins %d, max templates %d", pins, mt)
				}
			}},
		{name: "upstream block disabled", body: "template_preheat:\n  enabled: false\n  per_node_max_templates: 7\n", wantNil: true},
		{name: "empty", body: "", check: func(t *testing.T, pins, mt int, _ int64) {
			if pins != 0 || mt != 0 {
				t.Errorf("empty file: pins %d, max templates %d", pins, mt)
			}
		}},
		{name: "bad field", body: "per_node_max_templates: -2\n", wantErr: "per_node_max_templates"},
		{name: "misspelt key", body: "pinned_template: []\n", wantErr: "pinned_template"},
		{name: "not yaml", body: "{[", wantErr: "not YAML or JSON"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "policy.yaml")
			if err := os.WriteFile(path, []byte(c.body), 0o600); err != nil {
				t.Fatal(err)
			}
			p, err := loadPlacementPolicy(path)
			switch {
			case c.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), "CUBE_MASTER_PLACEMENT_POLICY_FILE") {
					t.Fatalf("got %v, want an error naming %s", err, c.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case c.wantNil:
				if p != nil {
					t.Fatalf("got %+v, want no policy", p)
				}
			default:
				c.check(t, len(p.PinnedTemplates), p.PerNodeMaxTemplates, p.PerNodeMaxBytes)
			}
		})
	}
	if p, err := loadPlacementPolicy(""); p != nil || err != nil {
		t.Fatalf("no file: %+v, %v", p, err)
	}
}
