package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// CreateTemplateRequest is a POST /cube/template body: a sandbox create
// request (upstream CreateCubeSandboxReq) kept as raw JSON, so fields this
// service does not model reach the nodes and the stored request unchanged,
// plus the few fields the service acts on.
type CreateTemplateRequest struct {
	// Raw is the request as received (a JSON object).
	Raw json.RawMessage
	// TemplateID comes from the cube.master.appsnapshot.template.id
	// annotation.
	TemplateID string
	// InstanceType defaults to core.DefaultInstanceType.
	InstanceType string
	// DistributionScope names the nodes; empty means every healthy node
	// of the instance type.
	DistributionScope core.NodeScope
	// SnapshotDir is passed to AppSnapshot; "" falls back to
	// Config.SnapshotDir.
	SnapshotDir string
}

// ParseCreateTemplateRequest reads the fields CreateTemplate needs from a
// sandbox create request. A missing template id is not an error here
// (CreateTemplate reports it); malformed JSON or a field of the wrong type
// is a *core.FieldError.
func ParseCreateTemplateRequest(raw json.RawMessage) (CreateTemplateRequest, error) {
	var head struct {
		Annotations       map[string]string `json:"annotations"`
		InstanceType      string            `json:"instance_type"`
		DistributionScope []string          `json:"distribution_scope"`
		SnapshotDir       string            `json:"snapshot_dir"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return CreateTemplateRequest{}, &core.FieldError{Field: "body", Reason: "not a valid sandbox create request: " + err.Error()}
	}
	return CreateTemplateRequest{
		Raw:               bytes.Clone(raw),
		TemplateID:        strings.TrimSpace(head.Annotations[core.AnnotationTemplateID]),
		InstanceType:      firstString(strings.TrimSpace(head.InstanceType), core.DefaultInstanceType),
		DistributionScope: head.DistributionScope,
		SnapshotDir:       head.SnapshotDir,
	}, nil
}

// templateLockName serializes the writers of one template's definition and
// replicas (synchronous create, delete).
func templateLockName(templateID string) string { return "tc_template_" + templateID }

// CreateTemplate creates a template from a sandbox create request (POST
// /cube/template, upstream createTemplate): synchronously, AppSnapshot runs
// on every target node before it returns.
//
// Refusals: no template id (core.ErrTemplateIDRequired), a definition that
// exists and is not FAILED (core.ErrDuplicateTemplate), an active
// from-image job (*core.ActiveJobError), no matching healthy node
// (core.ErrNoTemplateNodes; nothing is written). A FAILED definition is
// replaced: its nodes drop the template and its rows go first.
//
// The definition is written PENDING with the stored request, then every
// node's replica is upserted READY or FAILED as its snapshot finishes, and
// the definition ends with the summary over all its replicas (READY,
// PARTIALLY_READY or FAILED) and the joined node errors. A template that
// failed on every node is returned with status FAILED and a nil error.
func (s *Service) CreateTemplate(ctx context.Context, req CreateTemplateRequest) (*Template, error) {
	tid := req.TemplateID
	if err := core.ValidateTemplateID(tid); err != nil {
		if errors.Is(err, core.ErrTemplateIDRequired) {
			return nil, fmt.Errorf("annotation %s: %w", core.AnnotationTemplateID, err)
		}
		return nil, err
	}
	instanceType := firstString(req.InstanceType, core.DefaultInstanceType)
	stored, err := storedCreateRequest(req.Raw, tid, instanceType)
	if err != nil {
		return nil, err
	}
	snapBody, err := snapshotCreateRequest(req.Raw, tid, instanceType)
	if err != nil {
		return nil, err
	}
	snapReq, _, err := core.ParseSandboxRequest(snapBody)
	if err != nil {
		return nil, err
	}

	// The lock is watched: once it is lost (its session died) another
	// master may write the template, and this create records nothing more.
	outer := ctx
	ctx, lock, done, err := s.holdTemplate(ctx, tid)
	if err != nil {
		return nil, fmt.Errorf("create template %s: %w", tid, err)
	}
	defer done()

	if err := s.clearForCreate(ctx, tid); err != nil {
		return nil, err
	}
	targets, err := s.resolveNodes(ctx, instanceType, req.DistributionScope)
	if err != nil {
		return nil, err
	}
	if len(req.DistributionScope) == 0 {
		// No nodes named: the placement policy says where it goes (its
		// bytes are the node's own snapshot, counted as none).
		if targets, err = s.redoPolicyNodes(ctx, tid, nil, targets); err != nil {
			return nil, err
		}
	}

	tpl := s.Store.Templates()
	def := &core.Definition{
		TemplateID:   tid,
		InstanceType: instanceType,
		Version:      core.DefaultTemplateVersion,
		Status:       core.TemplatePending,
		RequestJSON:  string(stored),
	}
	err = s.Store.Tx(ctx, func(ctx context.Context, r ports.Repos) error {
		if err := r.Names().Claim(ctx, tid, tid, core.NameID); err != nil {
			return err
		}
		return r.Templates().CreateDefinition(ctx, def)
	})
	var taken *core.NameTakenError
	switch {
	case errors.As(err, &taken):
		return nil, fmt.Errorf("create template %s: %w", tid, err)
	case errors.Is(err, core.ErrConflict):
		return nil, fmt.Errorf("template %s was created concurrently: %w", tid, core.ErrDuplicateTemplate)
	case err != nil:
		return nil, fmt.Errorf("create template %s: %w", tid, err)
	}

	snapDir := firstString(req.SnapshotDir, s.cfg().SnapshotDir)
	spec := rawRequestSpec(req.Raw)
	errs := make([]string, len(targets))
	var mu sync.Mutex
	fanOut(len(targets), s.cfg().DistributionWorkers, func(i int) {
		n := targets[i]
		rep := &core.Replica{TemplateID: tid, NodeID: n.ID, NodeIP: n.IP, InstanceType: instanceType, Spec: spec}
		res, err := s.nodes().AppSnapshot(ctx, n, snapReq, snapDir)
		if err != nil {
			errs[i] = fmt.Sprintf("node %s: %v", n.ID, err)
			rep.Status, rep.Phase = core.ReplicaFailed, core.ReplicaPhaseFailed
			rep.LastErrorPhase, rep.CleanupRequired, rep.ErrorMessage = string(core.PhaseSnapshotting), true, err.Error()
		} else {
			rep.Status, rep.Phase, rep.SnapshotPath = core.ReplicaReady, core.ReplicaPhaseReady, res.SnapshotPath
			rep.GuestImageVersion, rep.AgentVersion, rep.KernelVersion = res.GuestImageVersion, res.AgentVersion, res.KernelVersion
		}
		if uerr := tpl.UpsertReplica(ctx, rep); uerr != nil {
			mu.Lock()
			errs[i] = joinNonEmpty("; ", errs[i], fmt.Sprintf("node %s: replica not recorded: %v", n.ID, uerr))
			mu.Unlock()
		}
	})

	// The outcome is recorded even when the caller has gone away, but only
	// while the lock still keeps other writers of the template out.
	if err := stillHeld(ctx, lock); errors.Is(err, errLockLost) {
		return nil, fmt.Errorf("create template %s: %w", tid, err)
	}
	wctx, cancel := detached(outer, 30*time.Second)
	defer cancel()
	replicas, err := tpl.ListReplicas(wctx, tid)
	if err != nil {
		return nil, fmt.Errorf("create template %s: %w", tid, err)
	}
	status := core.SummarizeReplicas(derefReplicas(replicas))
	lastErr := joinNonEmpty("; ", errs...)
	def, err = tpl.UpdateDefinition(wctx, tid, func(d *core.Definition) error {
		d.Status, d.LastError = status, lastErr
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("create template %s: %w", tid, err)
	}
	s.log().Info("template created", "template", tid, "status", status, "nodes", len(targets))
	return templateOf(def, replicas), nil
}

// clearForCreate applies the existence rules of a create: an active
// from-image job or a live definition refuses it; a FAILED definition is
// removed after its nodes dropped the template.
func (s *Service) clearForCreate(ctx context.Context, tid string) error {
	if active, err := s.Store.Jobs().GetActive(ctx, core.ActiveKeyFromImage(tid)); err == nil {
		return &core.ActiveJobError{TemplateID: tid, JobID: active.JobID, Status: active.Status}
	} else if !isNotFound(err) {
		return fmt.Errorf("read active job of %s: %w", tid, err)
	}
	tpl := s.Store.Templates()
	def, err := tpl.GetDefinition(ctx, tid)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read template %s: %w", tid, err)
	}
	if def.Status != core.TemplateFailed {
		return fmt.Errorf("template %s already exists (%s): %w", tid, def.Status, core.ErrDuplicateTemplate)
	}
	replicas, err := tpl.ListReplicas(ctx, tid)
	if err != nil {
		return err
	}
	cerrs := make([]error, len(replicas))
	fanOut(len(replicas), s.cfg().DistributionWorkers, func(i int) { cerrs[i] = s.cleanupReplica(ctx, replicas[i]) })
	if err := errors.Join(cerrs...); err != nil {
		return fmt.Errorf("replace failed template %s: %w", tid, err)
	}
	// The definition goes with its alias: a synchronous create names no
	// alias, and the replaced template's must not keep pointing here.
	return s.Store.Tx(ctx, func(ctx context.Context, r ports.Repos) error {
		if _, err := r.Templates().DeleteReplicas(ctx, tid); err != nil {
			return err
		}
		if err := r.Templates().DeleteDefinition(ctx, tid); err != nil && !isNotFound(err) {
			return err
		}
		_, err := r.Names().Release(ctx, tid, core.NameAlias)
		return err
	})
}

// storedCreateRequest is the definition's request_json made from a create
// request (upstream normalizeStoredTemplateRequest): template id annotation
// forced, snapshot-create annotation removed, version annotations v2, and
// the per-call fields cleared.
func storedCreateRequest(raw json.RawMessage, tid, instanceType string) ([]byte, error) {
	return rewriteCreateRequest(raw, instanceType, func(ann map[string]string) {
		ann[core.AnnotationTemplateID] = tid
		delete(ann, core.AnnotationAppSnapshotCreate)
		ann[core.AnnotationAppSnapshotVersion] = core.DefaultTemplateVersion
		ann[core.AnnotationTemplateVersion] = core.DefaultTemplateVersion
	}, "snapshot_dir", "timeout", "ins_id", "ins_ip", "requestID", "request_id")
}

// snapshotCreateRequest is the request AppSnapshot gets: the create
// request marked as a snapshot create of template tid.
func snapshotCreateRequest(raw json.RawMessage, tid, instanceType string) ([]byte, error) {
	return rewriteCreateRequest(raw, instanceType, func(ann map[string]string) {
		ann[core.AnnotationTemplateID] = tid
		ann[core.AnnotationAppSnapshotCreate] = "true"
	})
}

// rewriteCreateRequest edits the top level of a JSON object: the
// annotations through edit, a missing instance_type set, the named keys
// removed. Everything else is kept byte for byte.
func rewriteCreateRequest(raw json.RawMessage, instanceType string, edit func(map[string]string), drop ...string) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, &core.FieldError{Field: "body", Reason: "must be a JSON object"}
	}
	ann := map[string]string{}
	if a, ok := obj["annotations"]; ok {
		if err := json.Unmarshal(a, &ann); err != nil {
			return nil, &core.FieldError{Field: "annotations", Reason: "must be an object of strings"}
		}
		if ann == nil {
			ann = map[string]string{}
		}
	}
	edit(ann)
	b, err := json.Marshal(ann)
	if err != nil {
		return nil, err
	}
	obj["annotations"] = b
	if it := obj["instance_type"]; len(it) == 0 || string(it) == `""` || string(it) == "null" {
		obj["instance_type"], _ = json.Marshal(instanceType)
	}
	for _, k := range drop {
		delete(obj, k)
	}
	return json.Marshal(obj)
}

// rawRequestSpec is the replica's spec column for a raw create request;
// a request whose containers do not parse gets the empty spec.
func rawRequestSpec(raw json.RawMessage) string {
	var r struct {
		Containers []struct {
			Resources *core.Resource `json:"resources"`
		} `json:"containers"`
	}
	_ = json.Unmarshal(raw, &r)
	sr := &core.SandboxRequest{}
	for _, c := range r.Containers {
		sr.Containers = append(sr.Containers, core.Container{Resources: c.Resources})
	}
	return requestSpec(sr)
}
