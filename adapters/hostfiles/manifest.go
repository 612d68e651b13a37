package hostfiles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// ManifestFile is ports.ReleaseManifests for a JSON file
// (CUBE_TEMPLATE_CENTER_RELEASE_MANIFEST):
//
//	{"components": {"guest_image": "1.4.0", "agent": "1.4.0", "kernel": "6.6.30", "shim": "2.1.0"}}
//
// Other top-level keys and components it does not name are ignored. Only
// the one-click bundle ships it, so a missing file is no manifest, not an
// error.
type ManifestFile struct {
	Path string
}

var _ ports.ReleaseManifests = ManifestFile{}

// Manifest implements ports.ReleaseManifests.
func (m ManifestFile) Manifest(context.Context) (*core.ReleaseManifest, error) {
	if m.Path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(m.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("release manifest: %w", err)
	}
	var out core.ReleaseManifest
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("release manifest %s: not valid JSON: %w", m.Path, err)
	}
	return &out, nil
}
