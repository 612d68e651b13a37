package masterapp

import (
	"encoding/json"
	"fmt"
	"os"

	"gopkg.in/yaml.v3"

	"github.com/cubesandbox/templatecenter/core"
)

// loadPlacementPolicy reads the placement policy file
// (CUBE_MASTER_PLACEMENT_POLICY_FILE): YAML or JSON holding the policy's
// keys, or upstream's conf.yaml block template_preheat (its other keys
// ignored; enabled: false reads as no policy; download_base_url is this
// master's CUBE_MASTER_DOWNLOAD_BASE_URL and ignored here). "" is no
// policy. A bad file stops the master with an error naming the field.
func loadPlacementPolicy(path string) (*core.PlacementPolicy, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("CUBE_MASTER_PLACEMENT_POLICY_FILE: %w", err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("CUBE_MASTER_PLACEMENT_POLICY_FILE %s: not YAML or JSON: %w", path, err)
	}
	if up, ok := doc["template_preheat"].(map[string]any); ok {
		if enabled, ok := up["enabled"].(bool); ok && !enabled {
			return nil, nil
		}
		delete(up, "enabled")
		delete(up, "download_base_url")
		doc = up
	}
	js, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("CUBE_MASTER_PLACEMENT_POLICY_FILE %s: %w", path, err)
	}
	if len(doc) == 0 {
		js = nil
	}
	p, err := core.ParsePlacementPolicy(js)
	if err != nil {
		return nil, fmt.Errorf("CUBE_MASTER_PLACEMENT_POLICY_FILE %s: %w", path, err)
	}
	return p, nil
}
