package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// RedoRequest is POST /cube/template/redo.
type RedoRequest struct {
	RequestID  string
	TemplateID string
	// DistributionScope narrows the target nodes (ids or IPs); empty means
	// the scope of the template's own request, and if that is empty too,
	// every healthy node.
	DistributionScope core.NodeScope
	// FailedOnly keeps only targets whose replica is not READY or still
	// needs cleanup.
	FailedOnly bool
	// DownloadBaseURL is passed to the data plane when the redo has to
	// rebuild (normally the base URL of the API request).
	DownloadBaseURL string
	// RegistryUsername/RegistryPassword are used only by a rebuild of a
	// private image: credentials are never stored, so a rebuild without
	// them pulls anonymously.
	RegistryUsername string
	RegistryPassword string
}

// Redo retries a template from its latest job (upstream §5.2, with the
// fixes from §8):
//
//   - there must be no active (or BUILT) job: *core.ActiveJobError;
//   - the latest job must exist (core.ErrNotFound) and carry a from-image
//     request snapshot (legacy/commit templates: core.ErrUnsupported);
//   - when the latest job failed before its artifact existed, or the
//     artifact is not READY, or its bytes are gone (Config.ArtifactExists),
//     the redo is a full rebuild by the data plane from source_image_ref: a
//     new REDO job dispatched like a create (resume phase BUILDING_EXT4);
//   - otherwise a REDO job resumes at DISTRIBUTING or SNAPSHOTTING
//     (DetermineRedoResumePhase) on the target nodes and runs the resume
//     pipeline in the background.
//
// Targets: mode ALL (no scope), NODES (a scope) or FAILED_ONLY (intersect
// with replicas that are not READY or need cleanup; nothing left is an
// error wrapping core.ErrInvalidArgument). Zero healthy targets is
// core.ErrNoTemplateNodes. The redo always works from THIS template's
// request snapshot. The job row (with its request_json and target scope)
// is written in one transaction.
func (s *Service) Redo(ctx context.Context, rr RedoRequest) (*core.Job, error) {
	return s.redo(ctx, rr, false)
}

// errConvergeNeedsRebuild: the template's artifact cannot be reused, and
// convergence never rebuilds (a rebuild from the tag may change the
// template's content, and would fail its other nodes' replicas).
var errConvergeNeedsRebuild = errors.New("convergence never rebuilds")

// redo is Redo; converge makes it a convergence redo: it reuses the
// artifact the template's definition uses, whatever the latest job was,
// and refuses (errConvergeNeedsRebuild) instead of rebuilding. Its resume
// fails instead of rebuilding too (isConvergeJob).
func (s *Service) redo(ctx context.Context, rr RedoRequest, converge bool) (*core.Job, error) {
	tid := strings.TrimSpace(rr.TemplateID)
	if err := core.ValidateTemplateID(tid); err != nil {
		return nil, err
	}
	if err := core.ValidateRequestID(rr.RequestID); err != nil {
		return nil, err
	}
	scope := slices.Clone(rr.DistributionScope)
	if err := core.NormalizeScope(scope); err != nil {
		return nil, err
	}
	if scope == nil {
		scope = []string{}
	}
	// The template's lock keeps a delete of the same template from
	// interleaving: a delete finishes before the redo reads the template,
	// and none starts while the redo writes its job.
	// New credentials given to the redo become the template's.
	newAuth, err := s.sealAuth(&core.FromImageRequest{RegistryUsername: rr.RegistryUsername, RegistryPassword: rr.RegistryPassword})
	if err != nil {
		return nil, err
	}
	hctx, lock, done, err := s.holdTemplate(ctx, tid)
	if err != nil {
		return nil, fmt.Errorf("redo template %s: %w", tid, err)
	}
	job, n, rebuild, err := s.submitRedo(hctx, lock, tid, scope, rr, newAuth, converge)
	done()
	if err != nil {
		return nil, err
	}
	if rebuild {
		// The rebuild pulls with the template's own credentials (its
		// stored request keeps the username; the password is sealed on
		// the job), unless the redo call brings new ones.
		username := n.Request().RegistryUsername
		if rr.RegistryUsername != "" || rr.RegistryPassword != "" {
			n = n.WithCredentials(firstString(rr.RegistryUsername, username), rr.RegistryPassword)
		} else if auth, err := s.openAuth(job.RegistryAuth); err != nil {
			return s.failDispatch(ctx, job, err)
		} else {
			n = n.WithCredentials(firstString(auth.Username, username), auth.Password)
		}
		if n, err = n.WithRequestID(rr.RequestID); err != nil {
			return s.failDispatch(ctx, job, err)
		}
		return s.dispatch(ctx, job, n, rr.DownloadBaseURL, nil)
	}
	s.goBackground(ctx, "redo "+job.JobID, func(ctx context.Context) error { return s.Resume(ctx, job.JobID) })
	return job, nil
}

// submitRedo decides what the redo does and writes its job; the caller
// holds the template's lock.
func (s *Service) submitRedo(ctx context.Context, lock ports.Lock, tid string, scope core.NodeScope, rr RedoRequest, newAuth string, converge bool) (*core.Job, core.NormalizedRequest, bool, error) {
	var none core.NormalizedRequest
	key := core.ActiveKeyFromImage(tid)
	if active, err := s.Store.Jobs().GetActive(ctx, key); err == nil && !s.freeAbandoned(ctx, active) {
		return nil, none, false, &core.ActiveJobError{TemplateID: tid, JobID: active.JobID, Status: active.Status}
	} else if err != nil && !isNotFound(err) {
		return nil, none, false, err
	}
	latest, err := s.Store.Jobs().Latest(ctx, tid)
	if isNotFound(err) {
		return nil, none, false, fmt.Errorf("template %s has no job to redo: %w", tid, core.ErrNotFound)
	}
	if err != nil {
		return nil, none, false, err
	}
	if strings.TrimSpace(latest.RequestJSON) == "" {
		return nil, none, false, fmt.Errorf("template %s was not built from an image request and cannot be redone; recreate it from the source image: %w", tid, core.ErrUnsupported)
	}
	req, err := core.DecodeRequestJSON(latest.RequestJSON)
	if err != nil {
		return nil, none, false, err
	}
	if req.TemplateID != tid {
		return nil, none, false, fmt.Errorf("latest job of %s holds a request for %q: %w", tid, req.TemplateID, core.ErrInvalidArgument)
	}
	n, err := core.NormalizeFromImageRequest(req, nil)
	if err != nil {
		return nil, none, false, fmt.Errorf("stored request of %s: %w", tid, err)
	}
	if len(scope) == 0 {
		scope = req.DistributionScope
	}

	replicas, err := s.Store.Templates().ListReplicas(ctx, tid)
	if err != nil {
		return nil, none, false, err
	}
	phase := DetermineRedoResumePhase(latest.Phase, replicas)
	var artifact *core.Artifact
	var rebuild bool
	if converge {
		if artifact, phase, err = s.convergeArtifact(ctx, tid, phase); err != nil {
			return nil, none, false, err
		}
	} else {
		if artifact, rebuild, err = s.reusableArtifact(ctx, latest, phase); err != nil {
			return nil, none, false, err
		}
		if rebuild {
			phase = core.PhaseBuildingExt4
		}
	}

	mode := core.RedoAll
	switch {
	case rr.FailedOnly:
		mode = core.RedoFailedOnly
	case len(scope) > 0:
		mode = core.RedoNodes
	}
	targets, err := s.resolveNodes(ctx, req.InstanceType, scope)
	if err != nil {
		return nil, none, false, err
	}
	if len(scope) == 0 && !rr.FailedOnly {
		// No nodes named: the placement policy says where it goes.
		if targets, err = s.redoPolicyNodes(ctx, tid, artifact, targets); err != nil {
			return nil, none, false, err
		}
	}
	if rr.FailedOnly {
		if targets = failedTargets(targets, replicas); len(targets) == 0 {
			return nil, none, false, fmt.Errorf("template %s has no failed replicas on the target nodes: %w", tid, core.ErrInvalidArgument)
		}
	}
	ids := make([]string, len(targets))
	for i, n := range targets {
		ids[i] = n.ID
	}

	requestJSON, err := core.CanonicalRequestJSON(n)
	if err != nil {
		return nil, none, false, err
	}
	res, err := s.submitJob(ctx, jobPlan{
		templateID: tid,
		key:        key,
		lock:       lock,
		onActive: func(active *core.Job) (*core.Job, error) {
			return nil, &core.ActiveJobError{TemplateID: tid, JobID: active.JobID, Status: active.Status}
		},
		build: func(_ context.Context, cur *core.Job) (*core.Job, error) {
			if cur == nil || cur.JobID != latest.JobID {
				// Another job was created since the decision above was
				// made from latest: decide again from the new state.
				return nil, fmt.Errorf("redo template %s: another job was submitted meanwhile, retry: %w", tid, core.ErrConflict)
			}
			job := &core.Job{
				JobID:             s.IDs.NewJobID(),
				Operation:         core.OpRedo,
				RedoMode:          mode,
				RedoScope:         ids,
				ResumePhase:       phase,
				SourceImageRef:    req.SourceImageRef,
				SourceImageDigest: latest.SourceImageDigest,
				WritableLayerSize: req.WritableLayerSize,
				InstanceType:      req.InstanceType,
				NetworkType:       req.NetworkType,
				Status:            core.JobPending,
				Phase:             phase,
				RequestJSON:       requestJSON,
				// The template's own credentials travel with its jobs.
				RegistryAuth: firstString(newAuth, latest.RegistryAuth),
				RequestID:    rr.RequestID,
			}
			if rebuild {
				job.Phase = core.PhasePulling
				job.SourceImageDigest = ""
			} else {
				job.ArtifactID = artifact.ArtifactID
				job.Fingerprint = artifact.Fingerprint
				job.ArtifactStatus = string(artifact.Status)
				job.SourceImageDigest = firstString(artifact.SourceImageDigest, latest.SourceImageDigest)
			}
			return job, nil
		},
	})
	if err != nil {
		return nil, none, false, fmt.Errorf("redo template %s: %w", tid, err)
	}
	s.log().Info("redo submitted", "template", tid, "job", res.Job.JobID, "mode", mode, "resume_phase", phase, "targets", ids, "rebuild", rebuild)

	return res.Job, n, rebuild, nil
}

// reusableArtifact decides whether a redo can reuse the latest job's
// artifact: it must be named, its row READY and its bytes present, as the
// data plane answers when asked with the row's download token
// (bytesServed). Anything else means a rebuild. The resume re-checks under
// the artifact's lock and rebuilds if the artifact went away meanwhile
// (rebuildInstead).
func (s *Service) reusableArtifact(ctx context.Context, latest *core.Job, phase core.Phase) (*core.Artifact, bool, error) {
	if phase == core.PhaseBuildingExt4 || latest.ArtifactID == "" {
		return nil, true, nil
	}
	return s.artifactReusable(ctx, latest.ArtifactID)
}

// convergeArtifact is what a convergence redo reuses: the artifact the
// template's definition uses, READY with its bytes present, never another
// (errConvergeNeedsRebuild). Its resume phase is the redo's, except that
// a latest job that failed while building (a person's rebuild) does not
// make convergence build: it distributes and snapshots.
func (s *Service) convergeArtifact(ctx context.Context, tid string, phase core.Phase) (*core.Artifact, core.Phase, error) {
	def, err := s.Store.Templates().GetDefinition(ctx, tid)
	if err != nil {
		return nil, "", err
	}
	if (def.Status != core.TemplateReady && def.Status != core.TemplatePartiallyReady) || def.RootfsArtifactID == "" {
		return nil, "", fmt.Errorf("template %s is %s with artifact %q: %w", tid, def.Status, def.RootfsArtifactID, errConvergeNeedsRebuild)
	}
	a, rebuild, err := s.artifactReusable(ctx, def.RootfsArtifactID)
	if err != nil {
		return nil, "", err
	}
	if rebuild {
		return nil, "", fmt.Errorf("template %s: its artifact %s is not READY with its bytes in the store; redo the template to rebuild it: %w",
			tid, def.RootfsArtifactID, errConvergeNeedsRebuild)
	}
	if !phase.PostBuild() {
		phase = core.PhaseSnapshotting
	}
	return a, phase, nil
}

// isConvergeJob reports whether job is a convergence redo.
func isConvergeJob(job *core.Job) bool {
	return job.Operation == core.OpRedo && strings.HasPrefix(job.RequestID, ConvergeRequestPrefix)
}

// artifactReusable is reusableArtifact for a named artifact.
func (s *Service) artifactReusable(ctx context.Context, aid string) (*core.Artifact, bool, error) {
	a, err := s.Store.Artifacts().Get(ctx, aid)
	if isNotFound(err) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	if a.Status != core.ArtifactReady {
		// CLEANUP_PENDING bytes are on their way out; PENDING or BUILDING
		// ones may be half-written.
		return nil, true, nil
	}
	// Asked for real: a legacy row without a download token gets one
	// first; answered "present" unasked, a redo would reuse bytes that are
	// gone and send the nodes to download nothing.
	a, ok, err := s.bytesServed(ctx, a)
	if err != nil {
		return nil, false, fmt.Errorf("check artifact %s bytes: %w", aid, err)
	}
	if !ok {
		return nil, true, nil
	}
	return a, false, nil
}

// DetermineRedoResumePhase maps the latest job's phase to where a redo
// resumes (upstream determineRedoResumePhase): build phases rebuild
// (BUILDING_EXT4), DISTRIBUTING redistributes, the template phases
// re-snapshot; a job that ended elsewhere (READY) looks at the non-ready
// replicas' last error phase (DISTRIBUTING, else SNAPSHOTTING).
func DetermineRedoResumePhase(latest core.Phase, replicas []*core.Replica) core.Phase {
	switch latest {
	case "", core.PhasePulling, core.PhaseUnpacking, core.PhaseBuildingExt4, core.PhaseGeneratingJSON, core.PhaseUploading:
		return core.PhaseBuildingExt4
	case core.PhaseDistributing:
		return core.PhaseDistributing
	case core.PhaseCreatingTemplate, core.PhaseSnapshotting, core.PhaseRegistering:
		return core.PhaseSnapshotting
	}
	for _, r := range replicas {
		if r.Status != core.ReplicaReady && r.LastErrorPhase == string(core.PhaseDistributing) {
			return core.PhaseDistributing
		}
	}
	return core.PhaseSnapshotting
}

// failedTargets keeps the targets whose replica (core.Replica.OnNode) is
// not READY or still needs cleanup (upstream resolveRedoTargets).
func failedTargets(targets []ports.Node, replicas []*core.Replica) []ports.Node {
	var out []ports.Node
	for _, n := range targets {
		if slices.ContainsFunc(replicas, func(r *core.Replica) bool {
			return r.OnNode(n.ID, n.IP) && (r.Status != core.ReplicaReady || r.CleanupRequired)
		}) {
			out = append(out, n)
		}
	}
	return out
}

// rebuildInstead turns a PENDING redo whose artifact went away after the
// redo chose to reuse it into a rebuild: the job goes back to PULLING with
// no artifact, and the data plane builds it from the template's own request
// and credentials. The caller holds the artifact's lock.
func (s *Service) rebuildInstead(ctx context.Context, job *core.Job, stored *core.FromImageRequest, why error) error {
	c := *stored
	n, err := core.NormalizeFromImageRequest(&c, nil)
	if err != nil {
		return s.fail(ctx, job, core.PhaseDistributing, fmt.Errorf("%v; and it cannot be rebuilt: stored request: %w", why, err))
	}
	base, err := s.downloadBaseFor(ctx, job)
	if err != nil {
		return s.fail(ctx, job, core.PhaseDistributing, fmt.Errorf("%v; and it cannot be rebuilt: %w", why, err))
	}
	auth, err := s.openAuth(job.RegistryAuth)
	if err != nil {
		return s.fail(ctx, job, core.PhaseDistributing, fmt.Errorf("%v; and it cannot be rebuilt: %w", why, err))
	}
	fence := fenceOf(ctx, job.JobID)
	updated, err := s.Store.Jobs().Update(ctx, job.JobID, func(j *core.Job) error {
		if fence != 0 && j.Fence != fence {
			return fmt.Errorf("job %s: run %d writes, run %d holds it: %w", j.JobID, fence, j.Fence, core.ErrFenced)
		}
		if j.Status != core.JobPending || j.Operation != core.OpRedo {
			return errJobFinished
		}
		j.Phase, j.ResumePhase, j.Progress = core.PhasePulling, core.PhaseBuildingExt4, 0
		j.ArtifactID, j.Fingerprint, j.ArtifactStatus, j.SourceImageDigest = "", "", "", ""
		return nil
	})
	if err != nil {
		return err
	}
	s.log().Info("redo rebuilds: the artifact it meant to reuse went away", "job", job.JobID, "template", job.TemplateID, "why", why)
	_, err = s.dispatch(ctx, updated, n.WithCredentials(firstString(auth.Username, n.Request().RegistryUsername), auth.Password), base, nil)
	return err
}

// downloadBaseFor is the base URL nodes download a rebuilt artifact from:
// the configured one, else the one the template's nodes use today (the
// artifact URL in its stored request).
func (s *Service) downloadBaseFor(ctx context.Context, job *core.Job) (string, error) {
	if b := s.cfg().DownloadBaseURL; b != "" {
		return b, nil
	}
	def, err := s.Store.Templates().GetDefinition(ctx, job.TemplateID)
	if err != nil {
		return "", fmt.Errorf("no download base URL configured and template %s has no definition to take it from: %w", job.TemplateID, err)
	}
	var stored core.SandboxRequest
	if err := json.Unmarshal([]byte(def.RequestJSON), &stored); err == nil {
		for _, c := range stored.Containers {
			if c.Image == nil {
				continue
			}
			if u := c.Image.Annotations[core.AnnotationArtifactURL]; u != "" {
				if i := strings.Index(u, core.DownloadPath); i > 0 {
					return u[:i], nil
				}
			}
		}
	}
	return "", fmt.Errorf("no download base URL configured or recorded for template %s: %w", job.TemplateID, core.ErrInvalidArgument)
}
