package control

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// ConvergeRequestPrefix starts the request id of the redo jobs convergence
// submits, so job listings tell them from a person's redo.
const ConvergeRequestPrefix = "converge-"

// Converge is one convergence pass: every READY or PARTIALLY_READY
// template whose distribution scope (its create request's; empty: every
// node of its instance type) includes a healthy node without a READY
// replica gets a redo limited to those nodes. A node that was down when
// the template was distributed, or one that joined the directory later,
// so gets the template without anyone asking.
//
// A template created with no nodes named converges by the placement
// policy (convergePolicyNodes): a pinned one is the placement controller's
// to place, and under node limits an unpinned one is only brought back
// when it has no READY replica on a healthy node left.
//
// Convergence only ever adds nodes: its redo reuses the artifact the
// template's definition uses and never rebuilds (a rebuild from the tag
// could change the template's content and fail its other nodes). A
// template whose artifact cannot be reused is left alone, with a warning,
// until a person redoes it.
//
// It is bounded (Config.ConvergeAtOnce jobs a pass), idempotent (a
// template with an active job is left to it; the redo's own rules — one
// active job per template, the template's lock, the artifact's lock —
// apply), and backs off (Config.ConvergeBackoff) after a convergence job
// of the template left one of its nodes without a READY replica (the job
// failed, or only the snapshot did), so a node that keeps failing is not
// hammered. It returns the jobs it started.
func (s *Service) Converge(ctx context.Context) ([]*core.Job, error) {
	if s.cfg().ConvergeDisabled {
		return nil, nil
	}
	defs, err := s.Store.Templates().ListDefinitions(ctx)
	if err != nil {
		return nil, err
	}
	pf, err := s.Policy(ctx)
	if err != nil {
		return nil, err
	}
	var started []*core.Job
	var errs []error
	for _, d := range defs {
		if len(started) >= s.cfg().ConvergeAtOnce {
			break
		}
		job, err := s.convergeOne(ctx, pf.Policy, d)
		if err != nil {
			errs = append(errs, fmt.Errorf("converge %s: %w", d.TemplateID, err))
			continue
		}
		if job != nil {
			started = append(started, job)
		}
	}
	return started, errors.Join(errs...)
}

// convergeOne starts the redo that brings d to its missing nodes, or
// returns nil when there is nothing to do (yet).
func (s *Service) convergeOne(ctx context.Context, pol *core.PlacementPolicy, d *core.Definition) (*core.Job, error) {
	if d.Status != core.TemplateReady && d.Status != core.TemplatePartiallyReady {
		return nil, nil
	}
	latest, err := s.Store.Jobs().Latest(ctx, d.TemplateID)
	if isNotFound(err) {
		return nil, nil // a synchronous template: no image request to redo
	}
	if err != nil {
		return nil, err
	}
	if latest.Status.Unfinished() || strings.TrimSpace(latest.RequestJSON) == "" {
		return nil, nil
	}
	req, err := core.DecodeRequestJSON(latest.RequestJSON)
	if err != nil {
		return nil, nil // not a from-image template
	}
	nodes, err := s.Nodes.HealthyNodes(ctx, firstString(d.InstanceType, core.DefaultInstanceType))
	if err != nil {
		return nil, err
	}
	replicas, err := s.Store.Templates().ListReplicas(ctx, d.TemplateID)
	if err != nil {
		return nil, err
	}
	want := inScope(nodes, req.DistributionScope)
	if len(req.DistributionScope) == 0 && pol.Active() {
		if want, err = s.convergePolicyNodes(ctx, pol, d, nodes, replicas); err != nil || len(want) == 0 {
			return nil, err
		}
	}
	missing := missingNodes(want, replicas)
	if len(missing) == 0 || s.backingOff(ctx, latest, missing) {
		return nil, nil
	}
	job, err := s.redo(ctx, RedoRequest{RequestID: ConvergeRequestPrefix + s.IDs.NewHex()[:12], TemplateID: d.TemplateID, DistributionScope: missing}, true)
	var active *core.ActiveJobError
	if errors.As(err, &active) || errors.Is(err, core.ErrNoTemplateNodes) {
		return nil, nil // someone else is at work, or the node left again
	}
	if errors.Is(err, errConvergeNeedsRebuild) {
		s.log().Warn("template cannot converge onto nodes without a rebuild; convergence never rebuilds", "template", d.TemplateID, "nodes", missing, "err", err)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s.log().Info("converging template onto nodes", "template", d.TemplateID, "nodes", missing, "job", job.JobID)
	return job, nil
}

// backingOff reports whether the template's last attempt to converge is
// too recent to try again: a convergence redo that ended less than
// Config.ConvergeBackoff ago without bringing its nodes to READY, because
// it FAILED or because one of them is still missing (the copy worked, the
// snapshot did not: the job ended READY, the template PARTIALLY_READY).
func (s *Service) backingOff(ctx context.Context, latest *core.Job, missing []string) bool {
	if latest.Operation != core.OpRedo || !strings.HasPrefix(latest.RequestID, ConvergeRequestPrefix) ||
		s.storeNow(ctx).Sub(latest.UpdatedAt) >= s.cfg().ConvergeBackoff {
		return false
	}
	return latest.Status == core.JobFailed ||
		slices.ContainsFunc(latest.RedoScope, func(id string) bool { return slices.Contains(missing, id) })
}

// inScope keeps the nodes a template's scope includes; an empty scope
// names them all.
func inScope(nodes []ports.Node, scope core.NodeScope) []ports.Node {
	if len(scope) == 0 {
		return nodes
	}
	var out []ports.Node
	for _, n := range nodes {
		if scope.Includes(n.ID, n.IP) {
			out = append(out, n)
		}
	}
	return out
}

// missingNodes are the nodes without a READY replica, sorted by id.
func missingNodes(nodes []ports.Node, replicas []*core.Replica) []string {
	ready := map[string]bool{}
	for _, r := range replicas {
		if r.Status == core.ReplicaReady && !r.CleanupRequired {
			ready[r.NodeID] = true
		}
	}
	var out []string
	for _, n := range nodes {
		if !ready[n.ID] {
			out = append(out, n.ID)
		}
	}
	slices.Sort(out)
	return out
}
