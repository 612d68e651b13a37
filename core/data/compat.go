package data

import (
	"context"
	"errors"
	"maps"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// CompatScanner produces compat reports (GET|POST /cube/template/compat).
// A missing manifest is not an error (it ships only with the one-click
// bundle): the report says so and every status is UNKNOWN.
//
// Report shows the stored verdicts; Rescan recomputes them with
// core.Evaluate and stores each one with SetReplicaCompat, which touches
// only the compat columns so it cannot undo a job's concurrent replica
// write. Templates and Manifests are required; Clock defaults to the system
// clock.
type CompatScanner struct {
	Templates ports.TemplateRepository
	Manifests ports.ReleaseManifests
	Clock     ports.Clock
	// ManifestSource says where Manifests looks, for the report.
	ManifestSource string
}

// Report returns the verdicts of the last scan.
func (c *CompatScanner) Report(ctx context.Context) (*core.CompatReport, error) {
	return c.scan(ctx, false)
}

// Rescan re-reads the manifest and the recorded versions and stores new
// verdicts.
func (c *CompatScanner) Rescan(ctx context.Context) (*core.CompatReport, error) {
	return c.scan(ctx, true)
}

func (c *CompatScanner) now() time.Time {
	if c.Clock != nil {
		return c.Clock.Now()
	}
	return time.Now()
}

func (c *CompatScanner) scan(ctx context.Context, rescan bool) (*core.CompatReport, error) {
	m, err := c.Manifests.Manifest(ctx)
	if err != nil {
		return nil, err
	}
	rep := &core.CompatReport{ManifestSource: c.ManifestSource, ManifestFound: m != nil, Templates: []core.TemplateCompat{}}
	if m != nil && len(m.Components) > 0 {
		rep.Declared = maps.Clone(m.Components)
	}
	defs, err := c.Templates.ListDefinitions(ctx)
	if err != nil {
		return nil, err
	}
	now := c.now().Unix()
	var latest int64
	for _, d := range defs {
		rs, err := c.Templates.ListReplicas(ctx, d.TemplateID)
		if err != nil {
			return nil, err
		}
		tc := core.TemplateCompat{TemplateID: d.TemplateID}
		statuses := make([]core.CompatStatus, 0, len(rs))
		for _, r := range rs {
			st, checked := r.CompatStatus, r.CompatCheckedUnix
			if rescan {
				var reasons []string
				st, reasons = core.Evaluate(m, r)
				err := c.Templates.SetReplicaCompat(ctx, r.TemplateID, r.NodeID, st, now)
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
			rc := core.ReplicaCompat{NodeID: r.NodeID, Status: st}
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
		tc.Status = core.SummarizeCompat(statuses)
		rep.Templates = append(rep.Templates, tc)
	}
	if latest > 0 {
		rep.CheckedAt = time.Unix(latest, 0).UTC()
	}
	return rep, nil
}
