package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// errJobFinished stops a pipeline whose job someone else ended (a delete
// that failed it as stale, a concurrent replay that finished it).
var errJobFinished = errors.New("job already finished")

// Resume runs the resume pipeline of a job whose artifact exists: register
// the artifact, distribute it to the target nodes, write the definition,
// snapshot the template on the nodes that got the artifact, and finalize
// the replicas, the template status and the job (seed 001 §3.5, upstream
// §9 "Resume steps").
//
// It holds the per-artifact lock tc_resume_<artifact id> throughout, so the
// status callback, the BUILT sweeper, redo and delete never run on one
// artifact at once. Under the lock it re-reads the job and runs only when
// the job still needs it:
//
//   - BUILT (the data plane finished);
//   - PENDING REDO job in a post-build phase (a redo that reuses the
//     artifact);
//   - RUNNING in a post-build phase: a previous run died mid-way (it held
//     the lock until it finished, so holding it now means nobody else is
//     running). The replay keeps the token and repeats the idempotent
//     steps.
//
// Anything else (READY, FAILED, a build still running) is a duplicate and
// returns nil. It returns nil when the job ends READY and an error naming
// the reason when the job ends FAILED (the same reason is in the job).
func (s *Service) Resume(ctx context.Context, jobID string) error {
	_, err := s.resume(ctx, jobID, false)
	return err
}

// resume is Resume; ran says whether the pipeline ran. With try it does not
// wait for the artifact's lock: a lock held elsewhere returns an error
// wrapping core.ErrLocked.
func (s *Service) resume(ctx context.Context, jobID string, try bool) (ran bool, err error) {
	job, err := s.Store.Jobs().Get(ctx, jobID)
	if err != nil {
		return false, fmt.Errorf("resume job %s: %w", jobID, err)
	}
	if !resumable(job) {
		return false, nil
	}
	if job.ArtifactID == "" {
		return true, s.fail(ctx, job, core.PhaseDistributing, fmt.Errorf("job %s reached %s without an artifact id: %w", jobID, job.Status, core.ErrInvalidArgument))
	}
	lock, err := s.lockArtifact(ctx, job.ArtifactID, try)
	if err != nil {
		return false, fmt.Errorf("resume job %s: %w", jobID, err)
	}
	defer s.unlock(ctx, lock)
	ctx, cancel := context.WithTimeout(ctx, s.cfg().ResumeTimeout)
	defer cancel()
	ctx, release := whileHeld(ctx, lock)
	defer release()

	if job, err = s.Store.Jobs().Get(ctx, jobID); err != nil {
		return false, fmt.Errorf("resume job %s: %w", jobID, err)
	}
	if !resumable(job) {
		return false, nil
	}
	if job, ctx, err = s.claimRun(ctx, jobID); err != nil {
		return false, fmt.Errorf("resume job %s: %w", jobID, err)
	}
	err = s.runPipeline(ctx, job)
	if errors.Is(err, errJobFinished) {
		s.log().Info("resume stopped: job finished elsewhere", "job", jobID)
		return true, nil
	}
	return true, err
}

// resumable reports whether the resume pipeline should (re)run for job.
func resumable(j *core.Job) bool {
	switch j.Status {
	case core.JobBuilt:
		return true
	case core.JobRunning:
		return j.Phase.PostBuild() && j.Phase != core.PhaseReady
	case core.JobPending:
		return j.Operation == core.OpRedo && j.Phase.PostBuild() && j.Phase != core.PhaseReady
	}
	return false
}

// pipeline is one run's state.
type pipeline struct {
	job      *core.Job
	req      *core.FromImageRequest
	artifact *core.Artifact
	img      core.ImageConfig
	gen      *core.SandboxRequest // with the create annotation: what AppSnapshot gets
	stored   string               // the definition's request_json
	spec     string
	targets  []ports.Node
	// down are target nodes that went down after the job was submitted:
	// they get FAILED replicas and the template when they are back.
	down []ports.Node
	// previous holds the template's replica rows as they were before this
	// run, by node id: their snapshot paths locate what a node must drop
	// before it snapshots again.
	previous map[string]*core.Replica
	redo     bool
	// destroyFirst: a DISTRIBUTING redo destroys the node copy before
	// distributing again (the copy may be what failed).
	destroyFirst bool
	// phase is the phase this run last moved the job to, since when.
	phase core.Phase
	since time.Time
}

// The job's progress through the resume, after the build's (which ends at
// 80, core/pipeline): distribution moves it from progressDistributing to
// progressDefining node by node, snapshots from progressSnapshotting to
// 99.
const (
	progressDistributing = 85
	progressDefining     = 90
	progressSnapshotting = 92
	progressSnapshotsEnd = 99
)

// timed adds to u, when it moves the job to another phase, how long the
// phase it leaves took: measured here, where the resume does the work.
func (p *pipeline) timed(now time.Time, u core.JobUpdate) core.JobUpdate {
	if u.Phase == "" || u.Phase == p.phase {
		return u
	}
	if p.phase != "" {
		u.PhaseDurations = core.PhaseDurations{p.phase: now.Sub(p.since)}
	}
	p.phase, p.since = u.Phase, now
	return u
}

func (s *Service) runPipeline(ctx context.Context, job *core.Job) error {
	p := &pipeline{job: job, redo: job.Operation == core.OpRedo}
	firstRun := job.Status == core.JobBuilt || job.Status == core.JobPending

	req, err := core.DecodeRequestJSON(job.RequestJSON)
	if err != nil {
		return s.fail(ctx, job, core.PhaseDistributing, err)
	}
	if req.TemplateID != job.TemplateID {
		return s.fail(ctx, job, core.PhaseDistributing, fmt.Errorf("request_json names template %q, job belongs to %q: %w", req.TemplateID, job.TemplateID, core.ErrInvalidArgument))
	}
	p.req = req

	// 1. Register: bind a BUILT report's metadata, then claim the artifact
	// row. Its download token is minted
	// once and then kept: every template that uses the artifact hands it
	// to its nodes, so changing it would break the others.
	if job.Status == core.JobBuilt {
		if err := s.bindBuilt(ctx, job); err != nil {
			return s.fail(ctx, job, core.PhaseDistributing, err)
		}
	}
	if p.artifact, err = s.claimArtifact(ctx, job); err != nil {
		if p.redo && job.Status == core.JobPending && !isConvergeJob(job) {
			// The redo chose to reuse the artifact, which is gone, being
			// deleted or being rebuilt by now: build it again instead. A
			// convergence redo never builds: it fails, and backs off.
			return s.rebuildInstead(ctx, job, req, err)
		}
		return s.fail(ctx, job, core.PhaseDistributing, err)
	}
	if p.img, err = core.ParseImageConfigJSON(p.artifact.ImageConfigJSON); err != nil {
		return s.fail(ctx, job, core.PhaseDistributing, err)
	}
	ready := string(core.ArtifactReady)
	if _, err := s.step(ctx, job.JobID, p.timed(s.now(), core.JobUpdate{Status: core.JobRunning, Phase: core.PhaseDistributing, Progress: intp(progressDistributing), ArtifactStatus: ready})); err != nil {
		return err
	}

	// 2. Targets.
	scope := req.DistributionScope
	if p.redo {
		scope = job.RedoScope
		p.destroyFirst = firstRun && job.ResumePhase == core.PhaseDistributing
	}
	if p.targets, p.down, err = s.resolveTargets(ctx, job.InstanceType, scope); err != nil {
		return s.fail(ctx, job, core.PhaseDistributing, err)
	}
	if len(scope) == 0 {
		// No nodes named: the placement policy says where it goes.
		def, _ := s.Store.Templates().GetDefinition(ctx, job.TemplateID)
		pf, err := s.Policy(ctx)
		if err != nil {
			return s.fail(ctx, job, core.PhaseDistributing, err)
		}
		narrowed, err := s.policyNodes(ctx, pf.Policy, def, job.TemplateID, p.artifact, p.targets)
		if err != nil {
			return s.fail(ctx, job, core.PhaseDistributing, err)
		}
		if narrowed != nil {
			p.targets, p.down = narrowed, nil
		}
	}
	expected := len(p.targets) + len(p.down)
	if _, err := s.step(ctx, job.JobID, core.JobUpdate{ExpectedNodeCount: intp(expected)}); err != nil {
		return err
	}

	// The request nodes snapshot from, generated from THIS template's
	// request snapshot (never another template's generated request).
	token := s.downloadToken(p.artifact)
	ref := core.NodeArtifact{
		ArtifactID:        p.artifact.ArtifactID,
		DownloadURL:       core.DownloadURL(firstString(s.cfg().NodeDownloadBaseURL, p.artifact.DownloadBaseURL), p.artifact.ArtifactID, token),
		Token:             token,
		SHA256:            p.artifact.Ext4SHA256,
		SizeBytes:         p.artifact.Ext4SizeBytes,
		WritableLayerSize: firstString(p.artifact.WritableLayerSize, job.WritableLayerSize),
		Fingerprint:       firstString(p.artifact.Fingerprint, job.Fingerprint),
		InstanceType:      job.InstanceType,
	}
	if p.gen, err = GenerateSandboxRequest(req, ref, p.img); err != nil {
		return s.fail(ctx, job, core.PhaseDistributing, err)
	}
	p.gen.RequestID = job.JobID
	storedJSON, err := json.Marshal(StoredRequest(p.gen))
	if err != nil {
		return s.fail(ctx, job, core.PhaseDistributing, fmt.Errorf("marshal stored request: %w", err))
	}
	p.stored, p.spec = string(storedJSON), requestSpec(p.gen)

	// 3. Distribute.
	rows, err := s.Store.Templates().ListReplicas(ctx, job.TemplateID)
	if err != nil {
		return s.fail(ctx, job, core.PhaseDistributing, err)
	}
	p.previous = map[string]*core.Replica{}
	for _, r := range rows {
		p.previous[r.NodeID] = r
	}
	got, distErrs := s.distribute(ctx, p, ref)
	distErrs = append(distErrs, s.recordDown(ctx, p)...)
	if len(got) == 0 {
		first := ""
		if len(distErrs) > 0 {
			first = ": " + distErrs[0]
		}
		return s.fail(ctx, job, core.PhaseDistributing, fmt.Errorf("artifact distribution failed on all %d nodes%s", expected, first),
			withCounts(expected, 0, expected))
	}

	// 4. Definition (before any snapshot, so a replica never exists
	// without its template).
	if _, err := s.step(ctx, job.JobID, p.timed(s.now(), core.Progress(core.JobRunning, core.PhaseCreatingTemplate, progressDefining))); err != nil {
		return err
	}
	aliasNote, err := s.ensureDefinition(ctx, p)
	if err != nil {
		return s.fail(ctx, job, core.PhaseCreatingTemplate, err)
	}
	if err := s.settleOtherReplicas(ctx, p); err != nil {
		return s.failDefined(ctx, job, core.PhaseCreatingTemplate, err)
	}

	// 5. Snapshot on the nodes that got the artifact.
	if _, err := s.step(ctx, job.JobID, p.timed(s.now(), core.Progress(core.JobRunning, core.PhaseSnapshotting, progressSnapshotting))); err != nil {
		return err
	}
	snapped, snapErrs := s.snapshot(ctx, p, got)

	// 6. Finalize over ALL replica rows of the template.
	replicas, err := s.Store.Templates().ListReplicas(ctx, job.TemplateID)
	if err != nil {
		return s.failDefined(ctx, job, core.PhaseSnapshotting, err)
	}
	status := core.SummarizeReplicas(derefReplicas(replicas))
	lastErr := strings.Join(append(distErrs, snapErrs...), "; ")
	var def *core.Definition
	err = s.fenced(ctx, job.JobID, func(ctx context.Context, r ports.Repos) error {
		var err error
		def, err = r.Templates().UpdateDefinition(ctx, job.TemplateID, func(d *core.Definition) error {
			d.Status = status
			d.LastError = lastErr
			return nil
		})
		return err
	})
	if err != nil {
		return s.failDefined(ctx, job, core.PhaseSnapshotting, err)
	}
	counts := withCounts(expected, snapped, expected-snapped)
	if status == core.TemplateFailed {
		msg := "template snapshot failed on every node"
		if lastErr != "" {
			msg += ": " + lastErr
		}
		u := counts
		u.TemplateStatus = string(status)
		return s.fail(ctx, job, core.PhaseSnapshotting, errors.New(msg), u)
	}
	if !p.redo {
		// A create whose alias another template held when it was
		// submitted takes it now, if it is READY and the newer build.
		aliasNote = s.moveCreateAlias(ctx, job, p.req.Alias, status, aliasNote)
		if d, err := s.Store.Templates().GetDefinition(ctx, job.TemplateID); err == nil {
			def = d
		}
	}
	msg := joinNonEmpty("; ", lastErr, aliasNote)
	result, err := s.resultJSON(ctx, job, def, replicas)
	if err != nil {
		s.log().Warn("result_json not written", "job", job.JobID, "err", err)
	}
	u := p.timed(s.now(), core.Progress(core.JobReady, core.PhaseReady, 100))
	u.TemplateStatus = string(status)
	u.ErrorMessage = &msg
	u.ResultJSON = result
	u.ExpectedNodeCount, u.ReadyNodeCount, u.FailedNodeCount = counts.ExpectedNodeCount, counts.ReadyNodeCount, counts.FailedNodeCount
	if _, err := s.step(ctx, job.JobID, u); err != nil {
		return err
	}
	s.dropProgress(ctx, job.JobID)
	s.log().Info("template ready", "template", job.TemplateID, "job", job.JobID, "status", status, "nodes", expected, "ready", snapped)
	return nil
}

// claimArtifact takes a READY artifact row for distribution: a download
// token if it has none yet, the download base URL, and a renewed GC
// deadline. Any other status fails: bytes being deleted, half-written or
// absent are never distributed. The caller holds the artifact's lock.
func (s *Service) claimArtifact(ctx context.Context, job *core.Job) (*core.Artifact, error) {
	base := s.cfg().DownloadBaseURL
	deadline := s.gcDeadline(ctx)
	a, err := s.Store.Artifacts().Update(ctx, job.ArtifactID, func(a *core.Artifact) error {
		switch {
		case beingDeleted(a.Status):
			return fmt.Errorf("artifact %s is %s: %w", a.ArtifactID, a.Status, errArtifactDeleting)
		case a.Status != core.ArtifactReady:
			// PENDING or BUILDING bytes may be half-written; FAILED ones
			// are not there.
			return fmt.Errorf("artifact %s is %s, not READY; redo to rebuild: %w", a.ArtifactID, a.Status, core.ErrConflict)
		}
		if a.Ext4SHA256 == "" || a.Ext4SizeBytes <= 0 {
			return fmt.Errorf("artifact %s has no sha256/size recorded: %w", a.ArtifactID, core.ErrInvalidArgument)
		}
		if base != "" {
			a.DownloadBaseURL = base
		}
		if a.DownloadBaseURL == "" {
			return fmt.Errorf("artifact %s: no download base URL (neither recorded nor configured): %w", a.ArtifactID, core.ErrInvalidArgument)
		}
		if a.DownloadToken == "" {
			a.DownloadToken = core.NewDownloadSeed(s.IDs.NewToken())
		}
		a.GCDeadline = deadline
		a.LastError = ""
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("register artifact %s: %w", job.ArtifactID, err)
	}
	return a, nil
}

// bytesServed asks the data plane whether a READY artifact's bytes are
// served the way nodes will download them: with the row's download token.
// A legacy row (adopted from upstream, or written before tokens) may have
// none, and the download route opens no row without its token (the shared
// token only tells an unknown id from a refused one); ports.DataPlane
// cannot ask about such a row. So a READY row without a token first gets
// one, the token claimArtifact would mint when the artifact is next
// distributed, and is asked with it. The write is conditional on the row
// under its lock, so a token minted concurrently (another template's
// resume) is kept, never replaced. It returns the row as it now is; a row
// that is gone or no longer READY is reported absent, without asking.
func (s *Service) bytesServed(ctx context.Context, a *core.Artifact) (*core.Artifact, bool, error) {
	if a.Status == core.ArtifactReady && a.DownloadToken == "" {
		updated, err := s.Store.Artifacts().Update(ctx, a.ArtifactID, func(cur *core.Artifact) error {
			if cur.Status == core.ArtifactReady && cur.DownloadToken == "" {
				cur.DownloadToken = core.NewDownloadSeed(s.IDs.NewToken())
			}
			return nil
		})
		if isNotFound(err) {
			return a, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("give artifact %s a download token to ask about its bytes: %w", a.ArtifactID, err)
		}
		a = updated
	}
	if a.Status != core.ArtifactReady {
		return a, false, nil
	}
	ok, err := s.DataPlane.ArtifactExists(ctx, s.withDownloadToken(a))
	if err != nil {
		return nil, false, err
	}
	return a, ok, nil
}

// downloadToken is the token nodes download a's bytes with: derived from
// the row's seed (core.DownloadTokens), never the stored value itself.
func (s *Service) downloadToken(a *core.Artifact) string {
	return s.cfg().DownloadTokens.For(a.ArtifactID, a.DownloadToken)
}

// withDownloadToken is a copy of a carrying the token nodes download with
// instead of its seed, for asking the data plane the way nodes ask.
func (s *Service) withDownloadToken(a *core.Artifact) *core.Artifact {
	c := *a
	c.DownloadToken = s.downloadToken(a)
	return &c
}

// step applies u to the job. A stale update (a replay behind the job's
// phase) is skipped; errJobFinished when the job is terminal.
func (s *Service) step(ctx context.Context, jobID string, u core.JobUpdate) (*core.Job, error) {
	job, applied, err := s.Report(ctx, jobID, u)
	if err != nil {
		return nil, err
	}
	if !applied && job.Status.Terminal() {
		return nil, errJobFinished
	}
	if applied && s.Progress != nil && !job.Status.Terminal() {
		if perr := s.Progress.Publish(ctx, jobID, ports.LiveProgress{Phase: job.Phase, Progress: job.Progress, Pull: job.Pull}); perr != nil {
			s.log().Debug("live progress not published", "job", jobID, "err", perr)
		}
	}
	return job, nil
}

// fail ends the job FAILED in phase with cause (plus extra fields) and
// returns cause wrapped with the job id. The write uses a detached context
// so a cancelled or timed-out pipeline still records why it stopped.
func (s *Service) fail(ctx context.Context, job *core.Job, phase core.Phase, cause error, extra ...core.JobUpdate) error {
	if lockLost(ctx) || errors.Is(cause, core.ErrFenced) {
		// Another master may be running this job now: writing FAILED
		// would end its work. The job stays as it is; the sweep resumes
		// it once it has gone quiet.
		s.log().Warn("job stopped: lock lost", "job", job.JobID, "template", job.TemplateID, "phase", phase, "err", cause)
		if !lockLost(ctx) {
			return fmt.Errorf("job %s: %w", job.JobID, cause)
		}
		return fmt.Errorf("job %s: %w: %w", job.JobID, errLockLost, cause)
	}
	wctx, cancel := detached(ctx, 30*time.Second)
	defer cancel()
	u := core.Fail(phase, cause.Error())
	for _, e := range extra {
		u.ExpectedNodeCount, u.ReadyNodeCount, u.FailedNodeCount = e.ExpectedNodeCount, e.ReadyNodeCount, e.FailedNodeCount
		if e.TemplateStatus != "" {
			u.TemplateStatus = e.TemplateStatus
		}
	}
	if _, _, err := s.Report(wctx, job.JobID, u); err != nil {
		s.log().Error("job failure not recorded", "job", job.JobID, "cause", cause, "err", err)
	}
	s.dropProgress(wctx, job.JobID)
	s.log().Warn("job failed", "job", job.JobID, "template", job.TemplateID, "phase", phase, "err", cause)
	return fmt.Errorf("job %s: %w", job.JobID, cause)
}

// failDefined is fail for a job whose run has written its definition
// PENDING (ensureDefinition). The definition first takes the status its
// replica rows give, the one finalize would have written: those rows are
// what sandboxes can use now, so a create that got nowhere ends FAILED (and
// may be posted again) and a READY template whose redo failed on some
// nodes stays READY or PARTIALLY_READY on the others. Going back to the
// status before the run would claim replicas the run has since rewritten.
// Like fail, nothing is written once another run may own the job.
func (s *Service) failDefined(ctx context.Context, job *core.Job, phase core.Phase, cause error, extra ...core.JobUpdate) error {
	if !lockLost(ctx) && !errors.Is(cause, core.ErrFenced) {
		wctx, cancel := detached(ctx, 30*time.Second)
		err := s.fenced(wctx, job.JobID, func(ctx context.Context, r ports.Repos) error {
			rows, err := r.Templates().ListReplicas(ctx, job.TemplateID)
			if err != nil {
				return err
			}
			status := core.SummarizeReplicas(derefReplicas(rows))
			_, err = r.Templates().UpdateDefinition(ctx, job.TemplateID, func(d *core.Definition) error {
				if d.Status == core.TemplatePending {
					d.Status, d.LastError = status, cause.Error()
				}
				return nil
			})
			return err
		})
		cancel()
		if err != nil && !isNotFound(err) {
			s.log().Error("definition of a failed job not settled", "job", job.JobID, "template", job.TemplateID, "err", err)
		}
	}
	return s.fail(ctx, job, phase, cause, extra...)
}

func (s *Service) dropProgress(ctx context.Context, jobID string) {
	if s.Progress == nil {
		return
	}
	if err := s.Progress.Delete(ctx, jobID); err != nil {
		s.log().Debug("live progress not deleted", "job", jobID, "err", err)
	}
}

// resultTemplate is the stored shape of a finished job's result_json
// (upstream's TemplateInfo JSON); it is persisted, so its keys never change.
type resultTemplate struct {
	TemplateID        string          `json:"template_id"`
	InstanceType      string          `json:"instance_type,omitempty"`
	Version           string          `json:"version,omitempty"`
	Status            string          `json:"status"`
	Alias             string          `json:"alias,omitempty"`
	LastError         string          `json:"last_error,omitempty"`
	CreatedAt         string          `json:"created_at,omitempty"` // RFC 3339, UTC
	ImageInfo         string          `json:"image_info,omitempty"`
	JobID             string          `json:"job_id,omitempty"`
	ArtifactID        string          `json:"artifact_id,omitempty"`
	Replicas          []resultReplica `json:"replicas,omitempty"`
	RemoteBuildReport json.RawMessage `json:"remote_build_report,omitempty"`
}

type resultReplica struct {
	NodeID          string `json:"node_id"`
	NodeIP          string `json:"node_ip"`
	InstanceType    string `json:"instance_type,omitempty"`
	Spec            string `json:"spec,omitempty"`
	SnapshotPath    string `json:"snapshot_path,omitempty"`
	Status          string `json:"status"`
	Phase           string `json:"phase,omitempty"`
	ArtifactID      string `json:"artifact_id,omitempty"`
	LastJobID       string `json:"last_job_id,omitempty"`
	LastErrorPhase  string `json:"last_error_phase,omitempty"`
	CleanupRequired bool   `json:"cleanup_required,omitempty"`
	ErrorMessage    string `json:"error_message,omitempty"`
}

// resultJSON is the job's result_json: the template as it ended up, plus
// the data plane's BUILT report (kept in result_json while BUILT) under
// remote_build_report.
func (s *Service) resultJSON(ctx context.Context, job *core.Job, def *core.Definition, replicas []*core.Replica) (string, error) {
	cur, err := s.Store.Jobs().Get(ctx, job.JobID)
	if err != nil {
		return "", err
	}
	out := resultTemplate{
		TemplateID: def.TemplateID, InstanceType: def.InstanceType, Version: def.Version,
		Status: string(def.Status), Alias: def.Alias, LastError: def.LastError,
		ArtifactID: def.RootfsArtifactID, JobID: job.JobID,
		ImageInfo: ComposeImageInfo(job.SourceImageRef, job.SourceImageDigest),
	}
	if !def.CreatedAt.IsZero() {
		out.CreatedAt = def.CreatedAt.UTC().Format(time.RFC3339)
	}
	for _, r := range replicas {
		out.Replicas = append(out.Replicas, resultReplica{
			NodeID: r.NodeID, NodeIP: r.NodeIP, InstanceType: r.InstanceType, Spec: r.Spec,
			SnapshotPath: r.SnapshotPath, Status: string(r.Status), Phase: string(r.Phase),
			ArtifactID: r.ArtifactID, LastJobID: r.LastJobID, LastErrorPhase: r.LastErrorPhase,
			CleanupRequired: r.CleanupRequired, ErrorMessage: r.ErrorMessage,
		})
	}
	_, out.RemoteBuildReport = decodeBuilt(cur.ResultJSON)
	b, err := json.Marshal(out)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

func withCounts(expected, ready, failed int) core.JobUpdate {
	return core.JobUpdate{ExpectedNodeCount: &expected, ReadyNodeCount: &ready, FailedNodeCount: &failed}
}

func intp(v int) *int { return &v }

func firstString(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

func joinNonEmpty(sep string, parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, sep)
}

func derefReplicas(rs []*core.Replica) []core.Replica {
	out := make([]core.Replica, 0, len(rs))
	for _, r := range rs {
		out = append(out, *r)
	}
	return out
}

// redact hides secret in msg.
func redact(msg, secret string) string {
	if secret == "" {
		return msg
	}
	return strings.ReplaceAll(msg, secret, "REDACTED")
}
