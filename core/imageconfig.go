package core

import (
	"encoding/json"
	"fmt"
	"strings"
)

// ImageConfig is the part of an image's config that the generated sandbox
// request uses. It is what both planes store in t_cube_rootfs_artifact's
// image_config_json, with upstream's (Docker-style) key names.
type ImageConfig struct {
	Entrypoint []string `json:"Entrypoint,omitempty"`
	Cmd        []string `json:"Cmd,omitempty"`
	Env        []string `json:"Env,omitempty"`
	WorkingDir string   `json:"WorkingDir,omitempty"`
	User       string   `json:"User,omitempty"`
}

// JSON is the stored form of c.
func (c ImageConfig) JSON() (string, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("marshal image config: %w", err)
	}
	return string(b), nil
}

// ParseImageConfigJSON reads a stored image config; the empty string (rows
// written before the column was filled) is the empty config.
func ParseImageConfigJSON(s string) (ImageConfig, error) {
	var c ImageConfig
	if strings.TrimSpace(s) == "" {
		return c, nil
	}
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		return c, fieldErr("image_config_json", "not valid JSON: %v", err)
	}
	return c, nil
}
