package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/tcapi"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// compatScanner implements tcapi.Compat over the store.
//
// The release manifest (CUBE_TEMPLATE_CENTER_RELEASE_MANIFEST) is JSON:
//
//	{"components": {"guest_image": "1.4.0", "agent": "1.4.0", "kernel": "6.6.30", "shim": "2.1.0"}}
//
// Any other top-level keys are ignored, as are components it does not name.
// Only the one-click bundle ships it, so a missing file is not an error:
// the report says manifest_found=false and every status is UNKNOWN. A file
// that is there but unreadable or not JSON is an error, since it means a
// broken install rather than an absent one.
//
// Report shows the stored verdicts; Rescan recomputes them with
// core.Evaluate and stores each one with SetReplicaCompat, which touches only
// the compat columns so it cannot undo a job's concurrent replica write.
type compatScanner struct {
	templates ports.TemplateRepository
	manifest  string
	now       func() time.Time
}

func (c compatScanner) Report(ctx context.Context) (*tcapi.CompatReport, error) {
	return c.scan(ctx, false)
}

func (c compatScanner) Rescan(ctx context.Context) (*tcapi.CompatReport, error) {
	return c.scan(ctx, true)
}

// readManifest returns nil, nil when the file does not exist.
func (c compatScanner) readManifest() (*core.ReleaseManifest, error) {
	b, err := os.ReadFile(c.manifest)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("release manifest: %w", err)
	}
	var m core.ReleaseManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("release manifest %s: not valid JSON: %w", c.manifest, err)
	}
	return &m, nil
}

func (c compatScanner) scan(ctx context.Context, rescan bool) (*tcapi.CompatReport, error) {
	m, err := c.readManifest()
	if err != nil {
		return nil, err
	}
	rep := &tcapi.CompatReport{ManifestPath: c.manifest, ManifestFound: m != nil, Templates: []tcapi.TemplateCompat{}}
	if m != nil && len(m.Components) > 0 {
		rep.Declared = maps.Clone(m.Components)
	}
	defs, err := c.templates.ListDefinitions(ctx)
	if err != nil {
		return nil, err
	}
	now := c.now().Unix()
	var latest int64
	for _, d := range defs {
		rs, err := c.templates.ListReplicas(ctx, d.TemplateID)
		if err != nil {
			return nil, err
		}
		tc := tcapi.TemplateCompat{TemplateID: d.TemplateID}
		statuses := make([]core.CompatStatus, 0, len(rs))
		for _, r := range rs {
			st, checked := r.CompatStatus, r.CompatCheckedUnix
			if rescan {
				var reasons []string
				st, reasons = core.Evaluate(m, r)
				err := c.templates.SetReplicaCompat(ctx, r.TemplateID, r.NodeID, st, now)
				if errors.Is(err, core.ErrNotFound) {
					continue // removed since it was listed
				}
				if err != nil {
					return nil, err
				}
				checked = now
				tc.Reasons = append(tc.Reasons, reasons...)
			}
			if st == "" {
				st = core.CompatUnknown // never scanned
			}
			statuses = append(statuses, st)
			latest = max(latest, checked)
			comps := core.ReplicaComponents(r)
			rc := tcapi.ReplicaCompat{NodeID: r.NodeID, Status: string(st)}
			if len(comps) > 0 {
				rc.Components = comps
			}
			if checked > 0 {
				rc.CheckedAt = time.Unix(checked, 0).UTC()
			}
			tc.Replicas = append(tc.Replicas, rc)
			if len(tc.Replicas) == 1 {
				tc.Components = rc.Components
			} else if !maps.Equal(tc.Components, rc.Components) {
				tc.Components = nil
			}
		}
		tc.Status = string(core.SummarizeCompat(statuses))
		rep.Templates = append(rep.Templates, tc)
	}
	if latest > 0 {
		rep.CheckedAt = time.Unix(latest, 0).UTC()
	}
	return rep, nil
}
