package control

import (
	"context"
	"maps"

	"github.com/cubesandbox/templatecenter/core"
)

// holdings is what every node holds: the template copies (replicas) that
// count and the distinct artifacts they use. Templates built from one spec
// share an artifact, which a node keeps once, so a node's bytes are the
// sum of its distinct artifacts, not of its templates. It is the one count
// behind the console's node view, a create's placement and the placement
// controller's budgets.
type holdings struct {
	size  map[string]int64 // artifact id -> bytes
	nodes map[string]*nodeHolding
}

// nodeHolding is one node's share of holdings.
type nodeHolding struct {
	templates int
	refs      map[string]int // artifact id -> counted replicas using it
	bytes     int64
}

func newHoldings() *holdings {
	return &holdings{size: map[string]int64{}, nodes: map[string]*nodeHolding{}}
}

func (h *holdings) node(id string) *nodeHolding {
	nh := h.nodes[id]
	if nh == nil {
		nh = &nodeHolding{refs: map[string]int{}}
		h.nodes[id] = nh
	}
	return nh
}

// add counts one template copy on node using artifact aid ("" when
// unknown: it counts as a template of no bytes).
func (h *holdings) add(node, aid string) {
	nh := h.node(node)
	nh.templates++
	if aid == "" {
		return
	}
	if nh.refs[aid] == 0 {
		nh.bytes += h.size[aid]
	}
	nh.refs[aid]++
}

// remove undoes add: the artifact's bytes leave the node with the last
// copy that uses it.
func (h *holdings) remove(node, aid string) {
	h.node(node).drop(aid, h.size)
}

func (nh *nodeHolding) drop(aid string, size map[string]int64) {
	nh.templates--
	if aid == "" || nh.refs[aid] == 0 {
		return
	}
	if nh.refs[aid]--; nh.refs[aid] == 0 {
		delete(nh.refs, aid)
		nh.bytes -= size[aid]
	}
}

// usage is the node's count, as policies see it.
func (h *holdings) usage(node string) core.NodeUsage {
	nh := h.nodes[node]
	if nh == nil {
		return core.NodeUsage{}
	}
	return core.NodeUsage{Templates: nh.templates, Bytes: nh.bytes}
}

// cost is what one more copy using aid adds to the node's bytes: nothing
// when the node holds the artifact already.
func (h *holdings) cost(node, aid string) int64 {
	if nh := h.nodes[node]; nh != nil && nh.refs[aid] > 0 {
		return 0
	}
	return h.size[aid]
}

// without is the node's usage once the given copies are gone, and what
// one more copy using aid would then cost: the simulation behind making
// room, which changes nothing.
func (h *holdings) without(node string, gone []*core.Replica, artifactOf func(*core.Replica) string, aid string) (core.NodeUsage, int64) {
	nh := h.nodes[node]
	if nh == nil {
		return core.NodeUsage{}, h.size[aid]
	}
	c := &nodeHolding{templates: nh.templates, refs: maps.Clone(nh.refs), bytes: nh.bytes}
	for _, r := range gone {
		c.drop(artifactOf(r), h.size)
	}
	cost := h.size[aid]
	if c.refs[aid] > 0 {
		cost = 0
	}
	return core.NodeUsage{Templates: c.templates, Bytes: c.bytes}, cost
}

// replicaArtifact is the artifact a replica's node holds for it: the one
// the replica names, else its template's current one.
func replicaArtifact(r *core.Replica, def *core.Definition) string {
	if r.ArtifactID != "" || def == nil {
		return r.ArtifactID
	}
	return def.RootfsArtifactID
}

// artifactSize reads the bytes of artifact aid into h.size once; a
// missing artifact counts as 0 bytes.
func (s *Service) artifactSize(ctx context.Context, h *holdings, aid string) error {
	if _, ok := h.size[aid]; ok || aid == "" {
		return nil
	}
	a, err := s.Store.Artifacts().Get(ctx, aid)
	switch {
	case err == nil:
		h.size[aid] = a.Ext4SizeBytes
	case isNotFound(err):
		h.size[aid] = 0
	default:
		return err
	}
	return nil
}

// readHoldings counts, node by node, every template's replicas for which
// counted holds, leaving out the template exclude ("" for none). It reads
// every template's replicas and each artifact once.
func (s *Service) readHoldings(ctx context.Context, counted func(*core.Replica) bool, exclude string) (*holdings, error) {
	defs, err := s.Store.Templates().ListDefinitions(ctx)
	if err != nil {
		return nil, err
	}
	h := newHoldings()
	for _, d := range defs {
		if d.TemplateID == exclude {
			continue
		}
		reps, err := s.Store.Templates().ListReplicas(ctx, d.TemplateID)
		if err != nil {
			return nil, err
		}
		for _, r := range reps {
			if !counted(r) {
				continue
			}
			aid := replicaArtifact(r, d)
			if err := s.artifactSize(ctx, h, aid); err != nil {
				return nil, err
			}
			h.add(r.NodeID, aid)
		}
	}
	return h, nil
}

// NodeUsage is what one node holds: its READY template copies and the
// bytes of their rootfs images.
type NodeUsage = core.NodeUsage

// NodesUsage is what each node holds on disk: its READY replicas,
// those marked for cleanup included (their bytes are there until the
// node drops them), and the bytes of their distinct artifacts. A console
// view, not a hot path: it reads every template's replicas.
func (s *Service) NodesUsage(ctx context.Context) (map[string]NodeUsage, error) {
	h, err := s.readHoldings(ctx, func(r *core.Replica) bool { return r.Status == core.ReplicaReady }, "")
	if err != nil {
		return nil, err
	}
	out := make(map[string]NodeUsage, len(h.nodes))
	for id := range h.nodes {
		out[id] = h.usage(id)
	}
	return out, nil
}
