package core

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"
)

// JobStatus is the status column of t_cube_template_image_job.
type JobStatus string

// Job statuses. PENDING and RUNNING are active (invariant I1 applies); BUILT
// means the data plane finished the artifact and the control plane's resume
// pipeline has not yet finished; READY and FAILED are terminal and absorbing.
const (
	JobPending JobStatus = "PENDING"
	JobRunning JobStatus = "RUNNING"
	JobBuilt   JobStatus = "BUILT"
	JobReady   JobStatus = "READY"
	JobFailed  JobStatus = "FAILED"
)

var jobStatuses = []JobStatus{JobPending, JobRunning, JobBuilt, JobReady, JobFailed}

// ParseJobStatus validates a stored or reported status.
func ParseJobStatus(s string) (JobStatus, error) {
	st := JobStatus(s)
	if !slices.Contains(jobStatuses, st) {
		return "", fieldErr("status", "unknown job status %q", s)
	}
	return st, nil
}

// Active reports whether the job counts against invariant I1.
func (s JobStatus) Active() bool { return s == JobPending || s == JobRunning }

// unfinishedStatuses are the statuses of a job that has not ended.
var unfinishedStatuses = []JobStatus{JobPending, JobRunning, JobBuilt}

// UnfinishedJobStatuses lists the statuses of a job that has not ended:
// PENDING and RUNNING (active), and BUILT, whose resume pipeline still
// distributes the artifact. A job in one of them holds its artifact: the
// stores count it as a reference, and a delete abandons it first. Every
// other status is Terminal.
func UnfinishedJobStatuses() []JobStatus { return slices.Clone(unfinishedStatuses) }

// Unfinished reports whether s is one of UnfinishedJobStatuses.
func (s JobStatus) Unfinished() bool { return slices.Contains(unfinishedStatuses, s) }

// Terminal reports whether no further transition is possible.
func (s JobStatus) Terminal() bool { return s == JobReady || s == JobFailed }

// rank orders statuses along the only direction a job may travel.
func (s JobStatus) rank() int {
	switch s {
	case JobPending:
		return 0
	case JobRunning:
		return 1
	case JobBuilt:
		return 2
	default:
		return 3
	}
}

// Phase is the pipeline step a job is in.
type Phase string

// Phases, in pipeline order. The build phases belong to the data plane; the
// phases from DISTRIBUTING on belong to the control plane's resume pipeline.
const (
	PhasePulling          Phase = "PULLING"
	PhaseUnpacking        Phase = "UNPACKING"
	PhaseBuildingExt4     Phase = "BUILDING_EXT4"
	PhaseGeneratingJSON   Phase = "GENERATING_JSON"
	PhaseUploading        Phase = "UPLOADING"
	PhaseMigrating        Phase = "MIGRATING"
	PhaseDistributing     Phase = "DISTRIBUTING"
	PhaseCreatingTemplate Phase = "CREATING_TEMPLATE"
	PhaseSnapshotting     Phase = "SNAPSHOTTING"
	PhaseRegistering      Phase = "REGISTERING"
	PhaseReady            Phase = "READY"
)

var phaseOrder = []Phase{
	PhasePulling, PhaseUnpacking, PhaseBuildingExt4, PhaseGeneratingJSON, PhaseUploading,
	PhaseMigrating, PhaseDistributing, PhaseCreatingTemplate, PhaseSnapshotting, PhaseRegistering, PhaseReady,
}

// ParsePhase validates a stored or reported phase. The empty phase is valid
// (legacy rows).
func ParsePhase(s string) (Phase, error) {
	p := Phase(s)
	if p != "" && !slices.Contains(phaseOrder, p) {
		return "", fieldErr("phase", "unknown phase %q", s)
	}
	return p, nil
}

func (p Phase) rank() int { return slices.Index(phaseOrder, p) }

// PostBuild reports whether the phase belongs to the control plane's resume
// pipeline (after the artifact exists).
func (p Phase) PostBuild() bool { return p.rank() >= PhaseDistributing.rank() }

// Operation says what created a job.
type Operation string

// Operations.
const (
	OpCreate  Operation = "CREATE"
	OpRedo    Operation = "REDO"
	OpMigrate Operation = "MIGRATE"
)

// ParseOperation validates an operation; the empty operation is kept for
// legacy rows.
func ParseOperation(s string) (Operation, error) {
	switch o := Operation(s); o {
	case "", OpCreate, OpRedo, OpMigrate:
		return o, nil
	}
	return "", fieldErr("operation", "unknown operation %q", s)
}

// RedoMode selects the target nodes of a redo.
type RedoMode string

// Redo modes.
const (
	RedoAll        RedoMode = "ALL"
	RedoNodes      RedoMode = "NODES"
	RedoFailedOnly RedoMode = "FAILED_ONLY"
)

// PullProgress is the live pull counters, flushed to the job row at the end.
type PullProgress struct {
	TotalBytes      int64 `json:"pull_total_bytes,omitempty"`
	DownloadedBytes int64 `json:"pull_downloaded_bytes,omitempty"`
	TotalLayers     int   `json:"pull_total_layers,omitempty"`
	CompletedLayers int   `json:"pull_completed_layers,omitempty"`
	SpeedBPS        int64 `json:"pull_speed_bps,omitempty"`
}

// Job is one attempt at producing (or migrating) a template.
type Job struct {
	JobID        string
	TemplateID   string
	AttemptNo    int
	RetryOfJobID string
	Operation    Operation
	RedoMode     RedoMode
	RedoScope    []string
	ResumePhase  Phase

	ArtifactID        string
	Fingerprint       string
	SourceImageRef    string
	SourceImageDigest string
	WritableLayerSize string
	InstanceType      string
	NetworkType       string

	Status       JobStatus
	Phase        Phase
	Progress     int
	ErrorMessage string

	ExpectedNodeCount int
	ReadyNodeCount    int
	FailedNodeCount   int
	TemplateStatus    string
	ArtifactStatus    string

	// RequestJSON is the canonical request (no password, no requestID): the
	// idempotency key and the input of redo.
	RequestJSON string
	ResultJSON  string

	// ActiveKey is non-empty exactly while the job is active. The store keeps
	// it in a nullable unique column, which is what enforces invariant I1.
	ActiveKey string
	// RegistryAuth is the request's registry credentials, sealed by a
	// ports.Sealer (opaque here); "" when there are none or nothing could
	// seal them. A redo that rebuilds a private image opens it.
	RegistryAuth string
	// RequestID is the id of the API request that submitted the job
	// (request_id; convergence marks its redo jobs with it).
	RequestID string
	// Fence numbers the control-plane runs (resume, migrate) of the job:
	// each run takes the next number when it starts, under the job's lock,
	// and its writes carry it (JobUpdate.Fence). A run whose lock was lost
	// and taken over can then no longer publish: its number is stale.
	Fence int64
	// BuildOwner names the data-plane process that accepted the job's
	// build (its instance id, see OwnerLockName); "" before one did, and
	// on rows written by older data planes.
	BuildOwner string
	// PhaseDurations holds how long each finished phase took, measured
	// by the process that did its work.
	PhaseDurations PhaseDurations

	Pull PullProgress

	CreatedAt time.Time
	UpdatedAt time.Time
}

// Clone returns a deep copy.
func (j *Job) Clone() *Job {
	c := *j
	c.RedoScope = slices.Clone(j.RedoScope)
	c.PhaseDurations = maps.Clone(j.PhaseDurations)
	return &c
}

// MaxRequestIDLen is the width of the request_id column.
const MaxRequestIDLen = 128

// DistinctRequestID is the request id stored for a job whose request id
// another job of the same operation already has: the job id appended
// (upstream's normalization), the request id cut so the whole fits.
func DistinctRequestID(requestID, jobID string) string {
	suffix := "#" + jobID
	if keep := MaxRequestIDLen - len(suffix); len(requestID) > keep {
		requestID = requestID[:max(keep, 0)]
	}
	return requestID + suffix
}

// ActiveKeyFromImage is the I1 key of from-image (CREATE and REDO) jobs.
func ActiveKeyFromImage(templateID string) string { return "image/" + templateID }

// ActiveKeyMigrate is the key of migrate jobs: one active per template.
func ActiveKeyMigrate(templateID string) string { return "migrate/" + templateID }

// JobUpdate is a report or decision about a job. Zero fields are left alone.
type JobUpdate struct {
	Status            JobStatus
	Phase             Phase
	Progress          *int
	ErrorMessage      *string
	ArtifactID        string
	Fingerprint       string
	SourceImageDigest string
	ArtifactStatus    string
	TemplateStatus    string
	ResultJSON        string
	ExpectedNodeCount *int
	ReadyNodeCount    *int
	FailedNodeCount   *int
	Pull              *PullProgress
	// PhaseDurations are merged into the job's (a phase named again is
	// replaced).
	PhaseDurations PhaseDurations
	// Fence, when not 0, must equal the job's Fence: the update comes
	// from the run that holds the job (ErrFenced otherwise).
	Fence int64
}

// Apply moves the job according to u, enforcing the state machine:
//
//	PENDING -> RUNNING | BUILT | FAILED
//	RUNNING -> RUNNING | BUILT | READY | FAILED
//	BUILT   -> RUNNING (post-build phases only) | READY | FAILED
//	READY, FAILED: absorbing
//
// A report that would move the job backwards (an earlier status, an earlier
// phase, a build-phase report after BUILT, a BUILT report once the resume
// pipeline runs, anything after a terminal state)
// returns an error wrapping ErrStaleUpdate and leaves the job unchanged; a
// transition that skips the build (PENDING -> READY) returns a
// *TransitionError. Progress never decreases, also from one status to
// the next: a watcher's percentage only moves forward.
func (j *Job) Apply(u JobUpdate) error {
	to := u.Status
	if to == "" {
		to = j.Status
	}
	if _, err := ParseJobStatus(string(to)); err != nil {
		return err
	}
	if _, err := ParsePhase(string(u.Phase)); err != nil {
		return err
	}
	for ph := range u.PhaseDurations {
		if _, err := ParsePhase(string(ph)); err != nil || ph == "" {
			return fieldErr("phase_durations", "unknown phase %q", ph)
		}
	}
	if j.Status.Terminal() {
		return fmt.Errorf("job %s is %s: %w", j.JobID, j.Status, ErrStaleUpdate)
	}
	if u.Fence != 0 && u.Fence != j.Fence {
		return fmt.Errorf("job %s: run %d writes, run %d holds it: %w", j.JobID, u.Fence, j.Fence, ErrFenced)
	}
	if err := j.checkEdge(to, u.Phase); err != nil {
		return err
	}

	if to == j.Status && u.Phase != "" && j.Phase != "" && u.Phase.rank() < j.Phase.rank() {
		return fmt.Errorf("job %s: phase %s after %s: %w", j.JobID, u.Phase, j.Phase, ErrStaleUpdate)
	}

	j.Status = to
	if u.Phase != "" {
		j.Phase = u.Phase
	}
	if u.Progress != nil {
		p := min(max(*u.Progress, 0), 100)
		if to == JobBuilt {
			p = min(p, BuiltProgress)
		}
		j.Progress = max(j.Progress, p)
	}
	if u.ErrorMessage != nil {
		j.ErrorMessage = *u.ErrorMessage
	}
	setIf(&j.ArtifactID, u.ArtifactID)
	setIf(&j.Fingerprint, u.Fingerprint)
	setIf(&j.SourceImageDigest, u.SourceImageDigest)
	setIf(&j.ArtifactStatus, u.ArtifactStatus)
	setIf(&j.TemplateStatus, u.TemplateStatus)
	setIf(&j.ResultJSON, u.ResultJSON)
	if u.ExpectedNodeCount != nil {
		j.ExpectedNodeCount = *u.ExpectedNodeCount
	}
	if u.ReadyNodeCount != nil {
		j.ReadyNodeCount = *u.ReadyNodeCount
	}
	if u.FailedNodeCount != nil {
		j.FailedNodeCount = *u.FailedNodeCount
	}
	if u.Pull != nil {
		j.Pull = *u.Pull
	}
	if len(u.PhaseDurations) > 0 {
		if j.PhaseDurations == nil {
			j.PhaseDurations = PhaseDurations{}
		}
		for ph, d := range u.PhaseDurations {
			j.PhaseDurations[ph] = max(d, 0)
		}
	}
	if to.Terminal() {
		j.ActiveKey = ""
		if to == JobReady {
			j.Progress = 100
		}
	}
	return nil
}

func (j *Job) checkEdge(to JobStatus, phase Phase) error {
	from := j.Status
	switch {
	case from == JobBuilt && to == JobRunning:
		if phase == "" || !phase.PostBuild() {
			return fmt.Errorf("job %s: build report %s/%s after BUILT: %w", j.JobID, to, phase, ErrStaleUpdate)
		}
		return nil
	case from == JobBuilt && to == JobBuilt:
		// A retried BUILT report: the resume pipeline was already started
		// by the first one.
		return fmt.Errorf("job %s: duplicate BUILT report: %w", j.JobID, ErrStaleUpdate)
	case from == JobRunning && to == JobBuilt && j.Phase.PostBuild():
		// A retried BUILT report that lands after the resume pipeline took
		// the job to RUNNING/<post-build phase> would send it back to BUILT
		// and replay the resume; the pipeline is ahead, so the report is late.
		return fmt.Errorf("job %s: BUILT report after the resume pipeline reached %s: %w", j.JobID, j.Phase, ErrStaleUpdate)
	case to.rank() < from.rank():
		return fmt.Errorf("job %s: %s after %s: %w", j.JobID, to, from, ErrStaleUpdate)
	case from == JobPending && to == JobReady:
		return &TransitionError{JobID: j.JobID, From: from, To: to, Reason: "a job cannot be READY before it was built"}
	}
	return nil
}

func setIf(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

// BuiltProgress is where a job's progress stands once its build is done:
// the build takes the job from 0 to 80, the resume pipeline (distribution,
// the definition, snapshots) from 80 to 100. A BUILT report's progress is
// capped to it, whatever the data plane sends (upstream's says 100), so
// the percentage a watcher sees never goes back.
const BuiltProgress = 80

// Fail is the update that ends a job with an error in its current phase.
func Fail(phase Phase, msg string) JobUpdate {
	p := 100
	return JobUpdate{Status: JobFailed, Phase: phase, Progress: &p, ErrorMessage: &msg}
}

// Progress is a convenience for building updates.
func Progress(status JobStatus, phase Phase, progress int) JobUpdate {
	return JobUpdate{Status: status, Phase: phase, Progress: &progress}
}

// PhaseDurations is how long each finished phase of a job took. The
// process that does a phase's work measures it (the data plane the build
// phases, the control plane the rest), so a watcher shows the work's time,
// not its own polling. It is kept as JSON milliseconds
// ({"PULLING":1234}).
type PhaseDurations map[Phase]time.Duration

// MarshalJSON writes milliseconds by phase.
func (d PhaseDurations) MarshalJSON() ([]byte, error) {
	ms := make(map[Phase]int64, len(d))
	for ph, v := range d {
		ms[ph] = v.Milliseconds()
	}
	return json.Marshal(ms)
}

// UnmarshalJSON reads milliseconds by phase.
func (d *PhaseDurations) UnmarshalJSON(b []byte) error {
	var ms map[Phase]int64
	if err := json.Unmarshal(b, &ms); err != nil {
		return err
	}
	*d = make(PhaseDurations, len(ms))
	for ph, v := range ms {
		(*d)[ph] = time.Duration(v) * time.Millisecond
	}
	return nil
}
