package control

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Template is a template as the control plane reads it back: its
// definition with its replicas, or, for a template that has no definition
// yet (a first build in flight, or one that failed everywhere), what its
// latest job says.
type Template struct {
	TemplateID   string
	InstanceType string
	Version      string
	// Status is the definition's status, else the latest job's template
	// status, else the job's status in capitals (PENDING, RUNNING, FAILED).
	Status string
	Alias  string
	// AliasMovedFrom is the template Alias was moved away from (GetTemplate
	// only): moving it back undoes the move.
	AliasMovedFrom string
	LastError      string
	CreatedAt      time.Time
	// UpdatedAt is when the definition (else the latest job) last changed.
	UpdatedAt time.Time
	// ImageInfo is "ref@sha256:..." of the source image; JobID the latest
	// job; ArtifactID the rootfs artifact.
	ImageInfo  string
	JobID      string
	ArtifactID string
	// Backend is the copy-on-write backend the template's request names
	// ("" for the node's default).
	Backend string
	// CubeEgressCA* come from the template's artifact row (GetTemplate
	// only); CubeEgressCANote says why a template that wanted the CA
	// (with_cube_ca) was built without it.
	CubeEgressCABaked          bool
	CubeEgressCAFingerprint    string
	CubeEgressCATargetsWritten int64
	CubeEgressCANote           string
	// Builder is the Format of the builder that wrote the template's
	// artifact ("" when not known), from its artifact row (GetTemplate
	// only).
	Builder string
	// ReadyNodes of TargetNodes are the latest job's node counts (a
	// listing reads no replica rows; these say the same for the job's
	// nodes, live while it runs).
	ReadyNodes, TargetNodes int
	Replicas                []*core.Replica
	// CreateRequest is the stored sandbox create request (JSON), set by
	// GetTemplate only.
	CreateRequest string
}

// ComposeImageInfo is "ref@sha256:..." (the digest cut to its sha256:
// part, fixing upstream's "ref@name@sha256:..."); ref alone without a
// digest.
func ComposeImageInfo(ref, digest string) string {
	if i := strings.Index(digest, "sha256:"); i >= 0 {
		digest = digest[i:]
	}
	switch {
	case ref == "":
		return digest
	case digest == "":
		return ref
	}
	return ref + "@" + digest
}

func templateOf(def *core.Definition, replicas []*core.Replica) *Template {
	return &Template{
		TemplateID: def.TemplateID, InstanceType: def.InstanceType, Version: def.Version,
		Status: string(def.Status), Alias: def.Alias, LastError: def.LastError,
		CreatedAt: def.CreatedAt, UpdatedAt: def.UpdatedAt, ArtifactID: def.RootfsArtifactID, Replicas: replicas,
		Backend: storedBackend(def.RequestJSON),
	}
}

// storedBackend is the backend a stored sandbox request names; "" when it
// names none or cannot be read.
func storedBackend(requestJSON string) string {
	var r struct {
		Backend string `json:"backend"`
	}
	if requestJSON == "" || json.Unmarshal([]byte(requestJSON), &r) != nil {
		return ""
	}
	return r.Backend
}

// templateOfJob shows a template that has no definition yet (or whose
// build failed) through its latest job: the job's template status if set,
// else its status (upstream templateInfoFromJob).
func templateOfJob(j *core.Job) *Template {
	status := j.TemplateStatus
	if status == "" {
		status = strings.ToUpper(string(j.Status))
	}
	return &Template{
		TemplateID: j.TemplateID, InstanceType: j.InstanceType, Version: core.DefaultTemplateVersion,
		Status: status, LastError: j.ErrorMessage, CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt,
		ImageInfo: ComposeImageInfo(j.SourceImageRef, j.SourceImageDigest), JobID: j.JobID, ArtifactID: j.ArtifactID,
		Backend:    storedBackend(j.RequestJSON),
		ReadyNodes: j.ReadyNodeCount, TargetNodes: j.ExpectedNodeCount,
	}
}

// GetTemplate returns the template with its replicas and stored create
// request. Without a definition it falls back to the latest job (in-flight
// and failed templates show up as PENDING/RUNNING/FAILED);
// core.ErrNotFound when neither exists.
func (s *Service) GetTemplate(ctx context.Context, templateID string) (*Template, error) {
	if err := core.ValidateTemplateID(templateID); err != nil {
		return nil, err
	}
	tpl := s.Store.Templates()
	latest, err := s.Store.Jobs().Latest(ctx, templateID)
	if err != nil && !isNotFound(err) {
		return nil, err
	}
	replicas, err := tpl.ListReplicas(ctx, templateID)
	if err != nil {
		return nil, err
	}
	def, err := tpl.GetDefinition(ctx, templateID)
	var info *Template
	switch {
	case err == nil:
		info = templateOf(def, replicas)
		info.CreateRequest = s.storedRequestWithTokens(ctx, def.RequestJSON)
		if latest != nil {
			info.JobID, info.ReadyNodes, info.TargetNodes = latest.JobID, latest.ReadyNodeCount, latest.ExpectedNodeCount
			info.ImageInfo = ComposeImageInfo(latest.SourceImageRef, latest.SourceImageDigest)
		}
	case !isNotFound(err):
		return nil, err
	case latest == nil:
		return nil, fmt.Errorf("template %s: %w", templateID, core.ErrNotFound)
	default:
		info = templateOfJob(latest)
		info.Replicas = replicas
	}
	if err := s.caOf(ctx, info, latest); err != nil {
		return nil, err
	}
	if info.Alias != "" {
		if from, err := s.Store.Names().Previous(ctx, info.Alias); err == nil {
			info.AliasMovedFrom = from
		}
	}
	return info, nil
}

// caOf fills the template's CubeEgress CA fields and builder from its
// artifact row, and the note when its request wanted the CA and the image lacks it.
func (s *Service) caOf(ctx context.Context, info *Template, latest *core.Job) error {
	if info.ArtifactID == "" {
		return nil
	}
	a, err := s.Store.Artifacts().Get(ctx, info.ArtifactID)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	info.CubeEgressCABaked, info.CubeEgressCAFingerprint, info.CubeEgressCATargetsWritten =
		a.CubeEgressCABaked, a.CubeEgressCAFingerprint, a.CubeEgressCATargetsWritten
	info.Builder = a.Builder
	if latest != nil && a.Status == core.ArtifactReady {
		if req, err := core.DecodeRequestJSON(latest.RequestJSON); err == nil {
			info.CubeEgressCANote = caNote(req, a)
		}
	}
	return nil
}

// caNote says that a request that wanted the CubeEgress root CA baked
// (with_cube_ca, the default) got an image without it; "" otherwise.
func caNote(req *core.FromImageRequest, a *core.Artifact) string {
	if !core.WantsCubeCA(req) || a == nil || a.CubeEgressCABaked {
		return ""
	}
	return "with_cube_ca=true but the CubeEgress root CA is not baked into the image: no CA was installed at " +
		core.CubeCAPath + " (CUBE_MASTER_CA_DIR on the master, CUBE_TEMPLATE_CENTER_CUBE_CA_FILE on the template center) when it was built; install it and redo, or create with with_cube_ca=false"
}

// ListTemplates lists every template: definitions (by template id), then
// templates that only have jobs, shown through their latest job. Replicas
// and create requests are left out.
func (s *Service) ListTemplates(ctx context.Context) ([]Template, error) {
	defs, err := s.Store.Templates().ListDefinitions(ctx)
	if err != nil {
		return nil, err
	}
	// The job repository has no "latest per template" query; an unfiltered
	// stale query lists every job.
	all, err := s.Store.Jobs().ListStale(ctx, ports.StaleQuery{})
	if err != nil {
		return nil, err
	}
	latest := map[string]*core.Job{}
	// placed is each template's latest job that placed it on nodes: a
	// migrate moves the artifact only, so its counts say nothing of the
	// replicas.
	placed := map[string]*core.Job{}
	var order []string
	for _, j := range all {
		cur, ok := latest[j.TemplateID]
		if !ok {
			order = append(order, j.TemplateID)
		}
		if !ok || j.AttemptNo > cur.AttemptNo {
			latest[j.TemplateID] = j
		}
		if p := placed[j.TemplateID]; j.Operation != core.OpMigrate && (p == nil || j.AttemptNo > p.AttemptNo) {
			placed[j.TemplateID] = j
		}
	}
	// Upstream's order: definitions most recently updated first, then
	// templates that only have jobs (a create that failed everywhere), by
	// id.
	slices.SortStableFunc(defs, func(a, b *core.Definition) int { return b.UpdatedAt.Compare(a.UpdatedAt) })
	out := make([]Template, 0, len(defs))
	seen := map[string]bool{}
	for _, d := range defs {
		info := templateOf(d, nil)
		if j := latest[d.TemplateID]; j != nil {
			info.JobID, info.ReadyNodes, info.TargetNodes = j.JobID, j.ReadyNodeCount, j.ExpectedNodeCount
			info.ImageInfo = ComposeImageInfo(j.SourceImageRef, j.SourceImageDigest)
		}
		if p := placed[d.TemplateID]; p != nil {
			info.ReadyNodes, info.TargetNodes = p.ReadyNodeCount, p.ExpectedNodeCount
		}
		out = append(out, *info)
		seen[d.TemplateID] = true
	}
	for _, tid := range sortedStrings(order) {
		if !seen[tid] {
			out = append(out, *templateOfJob(latest[tid]))
		}
	}
	return out, nil
}

// ComponentVersions lists, replica by replica, the component versions each
// node reported when it built the template's snapshot (guest image, agent,
// kernel, shim; upstream's GET /internal/meta/templates/:id/component-versions).
// core.ErrNotFound for a template without a definition.
func (s *Service) ComponentVersions(ctx context.Context, templateID string) ([]*core.Replica, error) {
	if err := core.ValidateTemplateID(templateID); err != nil {
		return nil, err
	}
	if _, err := s.Store.Templates().GetDefinition(ctx, templateID); err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("template %s: %w", templateID, core.ErrNotFound)
		}
		return nil, err
	}
	return s.Store.Templates().ListReplicas(ctx, templateID)
}

// GetJob returns the job; core.ErrNotFound for an unknown id.
func (s *Service) GetJob(ctx context.Context, jobID string) (*core.Job, error) {
	if strings.TrimSpace(jobID) == "" {
		return nil, &core.FieldError{Field: "job_id", Reason: "is required"}
	}
	return s.Store.Jobs().Get(ctx, jobID)
}

// GetLiveJob is GetJob with, while the job is active, the live pull
// counters from the ProgressSink (which the database row only gets at
// phase changes).
func (s *Service) GetLiveJob(ctx context.Context, jobID string) (*core.Job, error) {
	j, err := s.GetJob(ctx, jobID)
	if err != nil {
		return nil, err
	}
	if s.Progress != nil && j.Status.Active() {
		if live, ok, err := s.Progress.Get(ctx, jobID); err == nil && ok && live.Pull.TotalBytes > 0 {
			j.Pull = live.Pull
		}
	}
	return j, nil
}

// JobNodes returns the replica rows the job's run wrote (its target
// nodes, a node that was down included), by node id: a watcher reads from
// them which nodes it still waits for.
func (s *Service) JobNodes(ctx context.Context, job *core.Job) ([]*core.Replica, error) {
	rows, err := s.Store.Templates().ListReplicas(ctx, job.TemplateID)
	if err != nil {
		return nil, err
	}
	var out []*core.Replica
	for _, r := range rows {
		if r.LastJobID == job.JobID {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *core.Replica) int { return strings.Compare(a.NodeID, b.NodeID) })
	return out, nil
}

// GetArtifact returns an artifact row; core.ErrNotFound if missing.
func (s *Service) GetArtifact(ctx context.Context, artifactID string) (*core.Artifact, error) {
	if strings.TrimSpace(artifactID) == "" {
		return nil, &core.FieldError{Field: "artifact_id", Reason: "is required"}
	}
	return s.Store.Artifacts().Get(ctx, artifactID)
}
