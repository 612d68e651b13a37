package control

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Placement defaults (Config).
const (
	// DefaultPlacementInterval is upstream's preheat period.
	DefaultPlacementInterval = 5 * time.Minute
	// DefaultPlacementAtOnce bounds the actions (redos started, replicas
	// evicted) of one controller pass.
	DefaultPlacementAtOnce = 8
	// DefaultPlacementDecisionsKept is how many decisions the store keeps
	// per template.
	DefaultPlacementDecisionsKept = 20
	// PlacementLockName is the named lock one master at a time runs the
	// placement controller under.
	PlacementLockName = "cubemaster_placement_controller"
	// PlacementRequestPrefix starts the request id of the redos the
	// controller starts.
	PlacementRequestPrefix = "placement-"
)

// Where the policy in force came from (PolicyInForce.Source).
const (
	PolicySourceAPI     = "api"
	PolicySourceFile    = "file"
	PolicySourceDefault = "default"
)

// PolicyInForce is the placement policy the masters apply.
type PolicyInForce struct {
	Policy *core.PlacementPolicy
	// Source is PolicySourceAPI (set through the API, kept in the store),
	// PolicySourceFile (the configuration's, CUBE_MASTER_PLACEMENT_POLICY_FILE)
	// or PolicySourceDefault (none: every template everywhere).
	Source string
	// SetAt is when the API set it (zero otherwise).
	SetAt time.Time
}

// Policy returns the policy in force: the one set through the API, else
// the configuration's, else the zero policy.
func (s *Service) Policy(ctx context.Context) (PolicyInForce, error) {
	doc, at, err := s.Store.Policies().Policy(ctx)
	switch {
	case err == nil:
		p, perr := core.ParsePlacementPolicy([]byte(doc))
		if perr != nil {
			return PolicyInForce{}, fmt.Errorf("stored placement policy: %w", perr)
		}
		return PolicyInForce{Policy: p, Source: PolicySourceAPI, SetAt: at}, nil
	case !isNotFound(err):
		return PolicyInForce{}, fmt.Errorf("read placement policy: %w", err)
	}
	if s.Config.PlacementPolicy != nil {
		return PolicyInForce{Policy: s.Config.PlacementPolicy, Source: PolicySourceFile}, nil
	}
	return PolicyInForce{Policy: &core.PlacementPolicy{}, Source: PolicySourceDefault}, nil
}

// SetPolicy replaces the policy every master applies with doc (a policy
// document, checked by core.ParsePlacementPolicy). An empty doc removes
// the API's policy: the configuration's applies again.
func (s *Service) SetPolicy(ctx context.Context, doc []byte) (PolicyInForce, error) {
	if len(strings.TrimSpace(string(doc))) == 0 {
		if err := s.Store.Policies().SetPolicy(ctx, ""); err != nil {
			return PolicyInForce{}, err
		}
		return s.Policy(ctx)
	}
	p, err := core.ParsePlacementPolicy(doc)
	if err != nil {
		return PolicyInForce{}, err
	}
	canon, err := json.Marshal(p)
	if err != nil {
		return PolicyInForce{}, err
	}
	if err := s.Store.Policies().SetPolicy(ctx, string(canon)); err != nil {
		return PolicyInForce{}, err
	}
	s.log().Info("placement policy replaced", "pins", len(p.PinnedTemplates), "per_node_max_templates", p.PerNodeMaxTemplates, "per_node_max_bytes", p.PerNodeMaxBytes)
	return s.Policy(ctx)
}

// PlacementDecisions returns the controller's recent decisions about the
// template (id or alias), newest first.
func (s *Service) PlacementDecisions(ctx context.Context, key string) ([]core.PlacementDecision, error) {
	tid, err := s.ResolveTemplateKey(ctx, key)
	if err != nil {
		return nil, err
	}
	if _, err := s.Store.Templates().GetDefinition(ctx, tid); err != nil {
		return nil, err
	}
	return s.Store.Policies().Decisions(ctx, tid, 0)
}

// RunPlacement runs a controller pass at once and then every interval
// until stop is closed. Every master runs it; the pass itself makes sure
// only one acts at a time (PlacementLockName).
func (s *Service) RunPlacement(stop <-chan struct{}, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultPlacementInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := s.PlacementPass(context.Background()); err != nil {
			s.log().Warn("placement pass finished with failures", "err", err)
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// PlacementReport is what one pass did.
type PlacementReport struct {
	// Ran is false when another master held the controller's lock, or the
	// policy changes nothing.
	Ran       bool
	Decisions []core.PlacementDecision
}

// Actions counts the decisions that changed something.
func (r PlacementReport) Actions() int {
	n := 0
	for _, d := range r.Decisions {
		if d.Decision == core.DecisionAdd || d.Decision == core.DecisionEvict {
			n++
		}
	}
	return n
}

// PlacementPass is one pass of the placement controller. Under the
// controller's lock (taken without waiting: a master that does not get
// it leaves the pass to the one that has it), it reads the policy in
// force and, when the policy pins or limits anything:
//
//  1. Pins, highest priority first: a pinned template with fewer READY
//     replicas on matching healthy nodes than its min_replicas gets a redo
//     (reusing its artifact, as convergence does) onto matching nodes that
//     lack it, never more than max_replicas, nodes where it fits within
//     their limits first; a node it does not fit is made room on by
//     evicting unpinned replicas. A template redone by the controller less
//     than per_template_min_redo_interval ago waits.
//  2. Budgets: a node over its limits loses unpinned replicas, least
//     recently placed first, until it is within them.
//
// A replica is evicted only when its template is not pinned, was not
// created with named nodes (those are the operator's explicit choice),
// has no active job, and keeps a READY replica on another healthy node.
// At most Config.PlacementAtOnce actions a pass. Every decision is logged,
// counted (Service.ObservePlacement) and, unless it only says that a pin
// is satisfied, stored for its template (bounded). When the lock is lost
// the pass stops before its next write.
func (s *Service) PlacementPass(ctx context.Context) (PlacementReport, error) {
	lock, err := s.Locker.TryLock(ctx, PlacementLockName)
	if errors.Is(err, core.ErrLocked) {
		s.log().Debug("placement controller runs on another master")
		return PlacementReport{}, nil
	}
	if err != nil {
		return PlacementReport{}, fmt.Errorf("placement lock: %w", err)
	}
	defer s.unlock(ctx, lock)
	wctx, release := whileHeld(ctx, lock)
	defer release()
	pf, err := s.Policy(wctx)
	if err != nil {
		return PlacementReport{}, err
	}
	if !pf.Policy.Active() {
		return PlacementReport{}, nil
	}
	v, err := s.placementView(wctx, pf.Policy)
	if err != nil {
		return PlacementReport{}, err
	}
	pc := &placementPass{s: s, lock: lock, v: v, budget: s.cfg().PlacementAtOnce, report: PlacementReport{Ran: true}}
	var errs []error
	for _, pin := range pf.Policy.Pins() {
		if err := pc.pin(wctx, pin); err != nil {
			errs = append(errs, err)
		}
		if err := stillHeld(wctx, lock); err != nil {
			return pc.report, err
		}
	}
	if err := pc.budgets(wctx); err != nil {
		errs = append(errs, err)
	}
	if err := stillHeld(wctx, lock); err != nil {
		return pc.report, err
	}
	return pc.report, errors.Join(errs...)
}

// placementView is what a pass decides from.
type placementView struct {
	pol   *core.PlacementPolicy
	nodes []ports.Node // healthy, of every instance type a template uses
	defs  map[string]*core.Definition
	// replicas by template; READY ones count toward node usage.
	replicas map[string][]*core.Replica
	held     *holdings // READY replicas not marked for cleanup
	// explicit: the template's create request named its nodes.
	explicit map[string]bool
	active   map[string]bool // the template has an unfinished job
	// lastAdd is when the controller last started a redo of the template.
	lastAdd map[string]time.Time
}

func isReadyReplica(r *core.Replica) bool { return r.Status == core.ReplicaReady && !r.CleanupRequired }

// placementView reads the definitions, replicas, artifact sizes, latest
// jobs and healthy nodes a decision needs.
func (s *Service) placementView(ctx context.Context, pol *core.PlacementPolicy) (*placementView, error) {
	defs, err := s.Store.Templates().ListDefinitions(ctx)
	if err != nil {
		return nil, err
	}
	v := &placementView{pol: pol, defs: map[string]*core.Definition{}, replicas: map[string][]*core.Replica{},
		held: newHoldings(), explicit: map[string]bool{}, active: map[string]bool{},
		lastAdd: map[string]time.Time{}}
	types := []string{core.DefaultInstanceType}
	for _, d := range defs {
		v.defs[d.TemplateID] = d
		types = append(types, firstString(d.InstanceType, core.DefaultInstanceType))
		if v.replicas[d.TemplateID], err = s.Store.Templates().ListReplicas(ctx, d.TemplateID); err != nil {
			return nil, err
		}
		if err := s.artifactSize(ctx, v.held, d.RootfsArtifactID); err != nil {
			return nil, err
		}
		latest, err := s.Store.Jobs().Latest(ctx, d.TemplateID)
		switch {
		case isNotFound(err):
		case err != nil:
			return nil, err
		default:
			v.active[d.TemplateID] = latest.Status.Unfinished()
			if req, err := core.DecodeRequestJSON(latest.RequestJSON); err == nil && len(req.DistributionScope) > 0 {
				v.explicit[d.TemplateID] = true
			}
		}
		if ds, err := s.Store.Policies().Decisions(ctx, d.TemplateID, 0); err == nil {
			for _, dec := range ds {
				if dec.Decision == core.DecisionAdd {
					v.lastAdd[d.TemplateID] = dec.At
					break
				}
			}
		}
		for _, r := range v.replicas[d.TemplateID] {
			if isReadyReplica(r) {
				if err := s.artifactSize(ctx, v.held, v.artifactOf(r)); err != nil {
					return nil, err
				}
				v.held.add(r.NodeID, v.artifactOf(r))
			}
		}
	}
	slices.Sort(types)
	for _, t := range slices.Compact(types) {
		ns, err := s.Nodes.HealthyNodes(ctx, t)
		if err != nil {
			return nil, fmt.Errorf("list healthy %s nodes: %w", t, err)
		}
		v.nodes = append(v.nodes, ns...)
	}
	v.nodes = sortNodes(v.nodes)
	return v, nil
}

// byKey finds the definition a pin names by id or alias.
func (v *placementView) byKey(key string) *core.Definition {
	if d, ok := v.defs[key]; ok {
		return d
	}
	for _, d := range v.defs {
		if d.Alias == key {
			return d
		}
	}
	return nil
}

func (v *placementView) healthy(id string) bool {
	return slices.ContainsFunc(v.nodes, func(n ports.Node) bool { return n.ID == id })
}

// readyOn returns the nodes with a READY replica of the template among
// the healthy ones.
func (v *placementView) readyNodes(tid string) []string {
	var out []string
	for _, r := range v.replicas[tid] {
		if isReadyReplica(r) && v.healthy(r.NodeID) {
			out = append(out, r.NodeID)
		}
	}
	return out
}

// evictable says whether the replica of tid may go, and why not.
func (v *placementView) evictable(tid string) (bool, string) {
	d := v.defs[tid]
	switch {
	case d == nil:
		return false, core.ReasonTemplateNotFound
	case v.pol.PinOf(tid, d.Alias) != nil, v.explicit[tid]:
		return false, ""
	case v.active[tid]:
		return false, core.ReasonActiveJob
	case len(v.readyNodes(tid)) < 2:
		return false, core.ReasonLastReady
	}
	return true, ""
}

// evictionOrder lists the node's READY replicas that may go, least
// recently placed first.
func (v *placementView) evictionOrder(nodeID string) []*core.Replica {
	var out []*core.Replica
	for tid, rs := range v.replicas {
		for _, r := range rs {
			if r.NodeID == nodeID && isReadyReplica(r) {
				if ok, _ := v.evictable(tid); ok {
					out = append(out, r)
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b *core.Replica) int {
		if c := a.UpdatedAt.Compare(b.UpdatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.TemplateID, b.TemplateID)
	})
	return out
}

// forget drops a replica from the view after it was evicted.
func (v *placementView) forget(r *core.Replica) {
	v.replicas[r.TemplateID] = slices.DeleteFunc(slices.Clone(v.replicas[r.TemplateID]), func(x *core.Replica) bool { return x.NodeID == r.NodeID })
	v.held.remove(r.NodeID, v.artifactOf(r))
}

// lessUsed orders nodes by room: fewer bytes held (to the MiB) first,
// then fewer templates.
func lessUsed(a, b core.NodeUsage) int {
	if c := cmp.Compare(a.Bytes>>20, b.Bytes>>20); c != 0 {
		return c
	}
	return cmp.Compare(a.Templates, b.Templates)
}

// artifactOf is the artifact the replica's node holds for it.
func (v *placementView) artifactOf(r *core.Replica) string {
	return replicaArtifact(r, v.defs[r.TemplateID])
}

// fits says whether one more copy of tid stays within node's limits: an
// artifact the node holds already costs no bytes.
func (v *placementView) fits(node, tid string) bool {
	return v.pol.Fits(v.held.usage(node), v.held.cost(node, v.templateArtifact(tid)))
}

// templateArtifact is the template's current artifact.
func (v *placementView) templateArtifact(tid string) string {
	if d := v.defs[tid]; d != nil {
		return d.RootfsArtifactID
	}
	return ""
}

// placementPass is one pass's state.
type placementPass struct {
	s      *Service
	lock   ports.Lock
	v      *placementView
	budget int
	report PlacementReport
}

// decide records one decision: a log line, the observer (the metric) and,
// when keep, the store.
func (pc *placementPass) decide(ctx context.Context, d core.PlacementDecision, keep bool) {
	s := pc.s
	d.Master = s.Config.MasterName
	attrs := []any{"template", d.TemplateID, "decision", d.Decision, "reason", d.Reason}
	if d.NodeID != "" {
		attrs = append(attrs, "node", d.NodeID)
	}
	if d.JobID != "" {
		attrs = append(attrs, "job", d.JobID)
	}
	if d.Message != "" {
		attrs = append(attrs, "detail", d.Message)
	}
	switch d.Decision {
	case core.DecisionAdd, core.DecisionEvict:
		s.log().Info("placement decision", attrs...)
	case core.DecisionFailed:
		s.log().Warn("placement decision", attrs...)
	default:
		s.log().Debug("placement decision", attrs...)
	}
	if s.ObservePlacement != nil {
		s.ObservePlacement(d)
	}
	pc.report.Decisions = append(pc.report.Decisions, d)
	if !keep || stillHeld(ctx, pc.lock) != nil {
		return
	}
	if d.Decision == core.DecisionSkipped {
		// A stuck pin or node says the same every pass: keep it once, so
		// it does not push the adds and evictions out of the record.
		if last, err := s.Store.Policies().Decisions(ctx, d.TemplateID, 1); err == nil && len(last) == 1 &&
			last[0].Decision == d.Decision && last[0].Reason == d.Reason && last[0].NodeID == d.NodeID {
			return
		}
	}
	if err := s.Store.Policies().AddDecision(ctx, d, s.cfg().PlacementDecisionsKept); err != nil {
		s.log().Warn("placement decision not recorded", "template", d.TemplateID, "err", err)
	}
}

// spend takes one action from the pass's budget.
func (pc *placementPass) spend() bool {
	if pc.budget <= 0 {
		return false
	}
	pc.budget--
	return true
}

// pin brings one pinned template up to its minimum.
func (pc *placementPass) pin(ctx context.Context, pin core.PinnedTemplate) error {
	v, s := pc.v, pc.s
	def := v.byKey(pin.TemplateID)
	if def == nil {
		pc.decide(ctx, core.PlacementDecision{TemplateID: pin.TemplateID, Decision: core.DecisionSkipped, Reason: core.ReasonTemplateNotFound}, false)
		return nil
	}
	tid := def.TemplateID
	skip := func(reason, msg string, keep bool) error {
		pc.decide(ctx, core.PlacementDecision{TemplateID: tid, Decision: core.DecisionSkipped, Reason: reason, Message: msg}, keep)
		return nil
	}
	if def.Status != core.TemplateReady && def.Status != core.TemplatePartiallyReady {
		return skip(core.ReasonNotReady, "status "+string(def.Status), false)
	}
	itype := firstString(def.InstanceType, core.DefaultInstanceType)
	var matching []ports.Node
	for _, n := range v.nodes {
		if firstString(n.InstanceType, core.DefaultInstanceType) == itype && v.pol.Matches(&pin, n.ID, n.IP) {
			matching = append(matching, n)
		}
	}
	ready := map[string]bool{}
	for _, id := range v.readyNodes(tid) {
		ready[id] = true
	}
	have := 0
	for _, n := range matching {
		if ready[n.ID] {
			have++
		}
	}
	want := pin.MinReplicas
	if want > len(matching) {
		want = len(matching)
	}
	if have >= want {
		return skip(core.ReasonMinMet, "", false)
	}
	if v.active[tid] {
		return skip(core.ReasonActiveJob, "", false)
	}
	if iv := time.Duration(v.pol.PerTemplateMinRedoInterval); iv > 0 && !v.lastAdd[tid].IsZero() && s.storeNow(ctx).Sub(v.lastAdd[tid]) < iv {
		return skip(core.ReasonCooldown, fmt.Sprintf("last redo %s ago, per_template_min_redo_interval %s", s.storeNow(ctx).Sub(v.lastAdd[tid]).Round(time.Second), iv), false)
	}
	need := want - have
	if pin.MaxReplicas > 0 && have+need > pin.MaxReplicas {
		need = pin.MaxReplicas - have
	}
	// Candidates: matching nodes without it, those it fits first (most
	// room first), then the others (room made by eviction).
	var cands []ports.Node
	for _, n := range matching {
		if !ready[n.ID] {
			cands = append(cands, n)
		}
	}
	slices.SortStableFunc(cands, func(a, b ports.Node) int {
		fa, fb := v.fits(a.ID, tid), v.fits(b.ID, tid)
		if fa != fb {
			if fa {
				return -1
			}
			return 1
		}
		return lessUsed(v.held.usage(a.ID), v.held.usage(b.ID))
	})
	var chosen []string
	for _, n := range cands {
		if len(chosen) >= need {
			break
		}
		if !v.fits(n.ID, tid) && !pc.makeRoom(ctx, n, tid) {
			continue
		}
		if lockLost(ctx) {
			return errLockLost
		}
		chosen = append(chosen, n.ID)
		v.held.add(n.ID, v.templateArtifact(tid))
	}
	if len(chosen) == 0 {
		return skip(core.ReasonNoCandidates, fmt.Sprintf("%d of %d READY on %d matching nodes; none has room, and no unpinned replica can make room", have, pin.MinReplicas, len(matching)), true)
	}
	if !pc.spend() {
		return skip(core.ReasonRateLimited, "", false)
	}
	if err := stillHeld(ctx, pc.lock); err != nil {
		return err
	}
	job, err := s.redo(ctx, RedoRequest{RequestID: PlacementRequestPrefix + s.IDs.NewHex()[:12], TemplateID: tid, DistributionScope: chosen}, true)
	var activeErr *core.ActiveJobError
	switch {
	case errors.As(err, &activeErr):
		return skip(core.ReasonActiveJob, "", false)
	case err != nil:
		pc.decide(ctx, core.PlacementDecision{TemplateID: tid, NodeID: strings.Join(chosen, ","), Decision: core.DecisionFailed, Reason: core.ReasonSubmitError, Message: err.Error()}, true)
		return fmt.Errorf("placement redo of %s: %w", tid, err)
	}
	v.active[tid] = true
	for _, id := range chosen {
		pc.decide(ctx, core.PlacementDecision{TemplateID: tid, NodeID: id, Decision: core.DecisionAdd, Reason: core.ReasonBelowMin, JobID: job.JobID,
			Message: fmt.Sprintf("%d of min_replicas %d READY on matching nodes", have, pin.MinReplicas)}, true)
	}
	return nil
}

// makeRoom evicts unpinned replicas from n, least recently placed first,
// until a copy of forTemplate fits; false (evicting nothing) when the
// evictable ones are not enough or the pass's budget is.
func (pc *placementPass) makeRoom(ctx context.Context, n ports.Node, forTemplate string) bool {
	v := pc.v
	aid := v.templateArtifact(forTemplate)
	fitsWithout := func(plan []*core.Replica) bool {
		u, cost := v.held.without(n.ID, plan, v.artifactOf, aid)
		return v.pol.Fits(u, cost)
	}
	var plan []*core.Replica
	for _, r := range v.evictionOrder(n.ID) {
		if fitsWithout(plan) {
			break
		}
		plan = append(plan, r)
	}
	if !fitsWithout(plan) || len(plan) >= pc.budget {
		return false
	}
	for _, r := range plan {
		if !pc.evict(ctx, n, r, core.ReasonMakeRoom, "room for pinned template "+forTemplate) {
			return false
		}
	}
	return true
}

// budgets brings every node over its limits back within them.
func (pc *placementPass) budgets(ctx context.Context) error {
	v := pc.v
	if !v.pol.Budgeted() {
		return nil
	}
	for _, n := range v.nodes {
		for v.pol.Over(v.held.usage(n.ID)) {
			order := v.evictionOrder(n.ID)
			if len(order) == 0 {
				pc.noteStuck(ctx, n)
				break
			}
			if pc.budget <= 0 {
				pc.decide(ctx, core.PlacementDecision{TemplateID: order[0].TemplateID, NodeID: n.ID, Decision: core.DecisionSkipped, Reason: core.ReasonRateLimited}, false)
				return nil
			}
			ok := pc.evict(ctx, n, order[0], core.ReasonOverBudget, fmt.Sprintf("node holds %d templates, %d bytes", v.held.usage(n.ID).Templates, v.held.usage(n.ID).Bytes))
			if err := stillHeld(ctx, pc.lock); err != nil {
				return err
			}
			if !ok {
				break
			}
		}
	}
	return nil
}

// noteStuck records, for the templates on a node over budget, why none of
// their replicas may go (the last READY replica, an active job).
func (pc *placementPass) noteStuck(ctx context.Context, n ports.Node) {
	v := pc.v
	for tid, rs := range v.replicas {
		for _, r := range rs {
			if r.NodeID != n.ID || !isReadyReplica(r) {
				continue
			}
			if ok, why := v.evictable(tid); !ok && why != "" {
				pc.decide(ctx, core.PlacementDecision{TemplateID: tid, NodeID: n.ID, Decision: core.DecisionSkipped, Reason: why,
					Message: "node over budget, replica kept"}, why == core.ReasonLastReady)
			}
		}
	}
}

// evict removes one replica (evictReplica) and records the decision.
func (pc *placementPass) evict(ctx context.Context, n ports.Node, r *core.Replica, reason, msg string) bool {
	if !pc.spend() {
		return false
	}
	if stillHeld(ctx, pc.lock) != nil {
		return false
	}
	if err := pc.s.evictReplica(ctx, pc.lock, n, r.TemplateID); err != nil {
		pc.decide(ctx, core.PlacementDecision{TemplateID: r.TemplateID, NodeID: n.ID, Decision: core.DecisionFailed, Reason: core.ReasonEvictError, Message: err.Error()}, !lockLost(ctx))
		return false
	}
	pc.v.forget(r)
	pc.decide(ctx, core.PlacementDecision{TemplateID: r.TemplateID, NodeID: n.ID, Decision: core.DecisionEvict, Reason: reason, Message: msg}, true)
	return true
}

// errEvictRefused: under the template's lock the replica turned out to be
// one that must stay.
var errEvictRefused = fmt.Errorf("replica must stay: %w", core.ErrConflict)

// evictReplica removes the template's replica from node n. Under the
// template's lock (so no redo or delete interleaves) it checks again that
// the template has no active job and keeps a READY replica on another
// healthy node, asks the node to drop the template's snapshot, and
// deletes the replica row. Then, under the artifact's lock (taken without
// waiting, after the template's is released: no holder waits for a second
// lock), it destroys the node's copy of the artifact when no other
// replica on the node uses it. Writes stop once the controller's lock
// (ctl) or the template's is lost.
func (s *Service) evictReplica(ctx context.Context, ctl ports.Lock, n ports.Node, tid string) error {
	hctx, lock, done, err := s.holdTemplate(ctx, tid)
	if err != nil {
		return err
	}
	aid, err := func() (string, error) {
		defer done()
		if latest, err := s.Store.Jobs().Latest(hctx, tid); err == nil && latest.Status.Unfinished() {
			return "", fmt.Errorf("template %s has an active job %s: %w", tid, latest.JobID, errEvictRefused)
		}
		reps, err := s.Store.Templates().ListReplicas(hctx, tid)
		if err != nil {
			return "", err
		}
		var mine *core.Replica
		others := 0
		for _, r := range reps {
			switch {
			case r.NodeID == n.ID:
				mine = r
			case isReadyReplica(r):
				if h, err := s.Nodes.HealthyNodes(hctx, firstString(r.InstanceType, core.DefaultInstanceType)); err == nil &&
					slices.ContainsFunc(h, func(x ports.Node) bool { return x.ID == r.NodeID }) {
					others++
				}
			}
		}
		if mine == nil {
			return "", nil // gone already
		}
		if others == 0 {
			return "", fmt.Errorf("template %s has no other READY replica on a healthy node: %w", tid, errEvictRefused)
		}
		if err := stillHeld(hctx, ctl); err != nil {
			return "", err
		}
		if err := stillHeld(hctx, lock); err != nil {
			return "", err
		}
		// The row goes first: sandboxes stop being placed on the node
		// before its snapshot does. A node that cannot drop it keeps a
		// stale copy no row points at; the error is logged.
		if _, err := s.Store.Templates().DeleteReplicas(hctx, tid, n.ID); err != nil {
			return "", err
		}
		if err := s.nodes().CleanupTemplate(hctx, n, tid, mine.SnapshotPath); err != nil {
			s.log().Warn("evicted replica's snapshot not cleaned on its node", "template", tid, "node", n.ID, "err", err)
		}
		return mine.ArtifactID, nil
	}()
	if err != nil || aid == "" {
		return err
	}
	s.dropCopy(ctx, ctl, n, aid)
	return nil
}

// dropCopy destroys the node's copy of the artifact when no replica on
// the node uses it any more; a busy artifact (its lock held) keeps it,
// and GC removes it with the artifact.
func (s *Service) dropCopy(ctx context.Context, ctl ports.Lock, n ports.Node, aid string) {
	alock, err := s.lockArtifact(ctx, aid, true)
	if err != nil {
		s.log().Debug("artifact busy; its copy stays on the node", "artifact", aid, "node", n.ID, "err", err)
		return
	}
	defer s.unlock(ctx, alock)
	reps, err := s.Store.Templates().ListReplicasByArtifact(ctx, aid)
	if err != nil || slices.ContainsFunc(reps, func(r *core.Replica) bool { return r.NodeID == n.ID }) {
		return
	}
	if stillHeld(ctx, ctl) != nil || stillHeld(ctx, alock) != nil {
		return
	}
	if err := s.nodes().DestroyImage(ctx, n, aid); err != nil {
		s.log().Warn("evicted replica's artifact copy not destroyed; GC removes it with the artifact", "artifact", aid, "node", n.ID, "err", err)
	}
}

// policyNodes narrows the healthy nodes a template with no nodes named
// goes to by the policy in force: nil when the policy changes nothing
// (every node, as always). A pinned template goes to its matching nodes,
// those it fits first, up to max_replicas (all matching when 0) and at
// least min_replicas; an unpinned one, under node limits, to every node it
// fits, or the one with the most room when it fits none (the controller
// then evicts the least recently placed replicas there).
//
// art is the artifact the template's copies will use (nil when not known
// yet: it then costs no bytes); a node holding it already is charged
// nothing more for it.
func (s *Service) policyNodes(ctx context.Context, pol *core.PlacementPolicy, def *core.Definition, tid string, art *core.Artifact, nodes []ports.Node) ([]ports.Node, error) {
	var err error
	alias := ""
	if def != nil {
		alias = def.Alias
	}
	pin := pol.PinOf(tid, alias)
	if pin == nil && !pol.Budgeted() {
		return nil, nil
	}
	held := newHoldings()
	if pol.Budgeted() {
		if held, err = s.readHoldings(ctx, isReadyReplica, tid); err != nil {
			return nil, err
		}
	}
	aid := ""
	if art != nil {
		aid = art.ArtifactID
		held.size[aid] = art.Ext4SizeBytes
	}
	fits := func(node string) bool { return pol.Fits(held.usage(node), held.cost(node, aid)) }
	var cands []ports.Node
	for _, n := range nodes {
		if pin == nil || pol.Matches(pin, n.ID, n.IP) {
			cands = append(cands, n)
		}
	}
	if len(cands) == 0 {
		return nil, fmt.Errorf("template %s is pinned to nodes none of which is healthy: %w", tid, core.ErrNoTemplateNodes)
	}
	slices.SortStableFunc(cands, func(a, b ports.Node) int {
		fa, fb := fits(a.ID), fits(b.ID)
		if fa != fb {
			if fa {
				return -1
			}
			return 1
		}
		return lessUsed(held.usage(a.ID), held.usage(b.ID))
	})
	var out []ports.Node
	for _, n := range cands {
		switch {
		case pin != nil && pin.MaxReplicas > 0 && len(out) >= pin.MaxReplicas:
		case fits(n.ID), pin != nil && len(out) < pin.MinReplicas:
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		out = cands[:1] // fits nowhere: the node with the most room
	}
	return sortNodes(out), nil
}

// redoPolicyNodes is policyNodes for a redo that names no nodes: targets
// when the policy changes nothing.
func (s *Service) redoPolicyNodes(ctx context.Context, tid string, artifact *core.Artifact, targets []ports.Node) ([]ports.Node, error) {
	def, err := s.Store.Templates().GetDefinition(ctx, tid)
	if err != nil && !isNotFound(err) {
		return nil, err
	}
	if artifact == nil && def != nil && def.RootfsArtifactID != "" {
		if a, err := s.Store.Artifacts().Get(ctx, def.RootfsArtifactID); err == nil {
			artifact = a
		}
	}
	pf, err := s.Policy(ctx)
	if err != nil {
		return nil, err
	}
	narrowed, err := s.policyNodes(ctx, pf.Policy, def, tid, artifact, targets)
	if err != nil || narrowed == nil {
		return targets, err
	}
	return narrowed, nil
}

// convergePolicyNodes is where convergence takes a template created with
// no nodes named when the policy is active: nowhere for a pinned one (the
// placement controller keeps pins at their minimum); with node limits,
// nowhere while it has a READY replica on a healthy node, else the nodes
// policyNodes gives it; without limits, every node.
func (s *Service) convergePolicyNodes(ctx context.Context, pol *core.PlacementPolicy, d *core.Definition, nodes []ports.Node, replicas []*core.Replica) ([]ports.Node, error) {
	if pol.PinOf(d.TemplateID, d.Alias) != nil || len(nodes) == 0 {
		return nil, nil
	}
	if !pol.Budgeted() {
		return nodes, nil
	}
	for _, r := range replicas {
		if isReadyReplica(r) && slices.ContainsFunc(nodes, func(n ports.Node) bool { return n.ID == r.NodeID }) {
			return nil, nil
		}
	}
	var art *core.Artifact
	if d.RootfsArtifactID != "" {
		if a, err := s.Store.Artifacts().Get(ctx, d.RootfsArtifactID); err == nil {
			art = a
		}
	}
	out, err := s.policyNodes(ctx, pol, d, d.TemplateID, art, nodes)
	if err != nil || out == nil {
		return nil, err
	}
	return out[:1], nil
}
