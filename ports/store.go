package ports

import (
	"context"
	"time"

	"github.com/cubesandbox/templatecenter/core"
)

// Store is the metadata store. Calls through its Repos run in their own
// short transaction each; Tx runs fn in one transaction. Errors wrap core
// sentinels: core.ErrNotFound for a missing row, core.ErrConflict for a
// unique-key violation, core.ErrStoreNotInitialized when the store is closed.
type Store interface {
	Repos
	// Tx runs fn in a single transaction and commits if fn returns nil. The
	// Repos given to fn must not be used after fn returns. A deadlock or
	// serialization failure is retried a bounded number of times, so fn must
	// be safe to run more than once.
	Tx(ctx context.Context, fn func(ctx context.Context, r Repos) error) error
	// Close releases the connection pool.
	Close() error
	// Now is the store's clock: the time created_at and updated_at are
	// stamped with (the database's, for a database). Ages of rows are
	// judged against it, never against a host's own clock, so hosts whose
	// clocks disagree still agree on which jobs are stale.
	Now(ctx context.Context) (time.Time, error)
}

// Repos groups the repositories of one transaction scope.
type Repos interface {
	Jobs() JobRepository
	Templates() TemplateRepository
	Artifacts() ArtifactRepository
	Placements() PlacementRepository
	Nodes() NodeRepository
	Names() NameRepository
	Policies() PolicyRepository
}

// StaleQuery selects jobs for the reconciler.
type StaleQuery struct {
	Statuses []core.JobStatus
	// Phases, if not empty, restricts the match to these phases; ExcludePhases
	// removes them.
	Phases        []core.Phase
	ExcludePhases []core.Phase
	// UpdatedBefore selects rows whose updated_at is strictly older.
	UpdatedBefore time.Time
	// Limit caps the answer (<= 0: no cap), keeping the oldest rows, or
	// the newest with NewestFirst.
	Limit int
	// NewestFirst orders the answer by updated_at descending (a listing
	// of recent jobs) instead of ascending; among rows updated at the
	// same instant the later inserted comes first.
	NewestFirst bool
}

// JobRepository stores t_cube_template_image_job rows.
type JobRepository interface {
	// Create inserts job. CreatedAt/UpdatedAt are set by the store. If
	// job.ActiveKey is not empty and another row holds the same active key,
	// or job id or (template id, attempt) is taken, it returns an error
	// wrapping core.ErrConflict and writes nothing. (request id, operation)
	// names one job, as upstream keys idempotency on it: an empty request id
	// is stored as the job id, and one another job of the operation already
	// has as core.DistinctRequestID; job.RequestID is set to what was
	// stored.
	Create(ctx context.Context, job *core.Job) error
	// Get returns the job or core.ErrNotFound.
	Get(ctx context.Context, jobID string) (*core.Job, error)
	// GetActive returns the job holding activeKey, or core.ErrNotFound.
	GetActive(ctx context.Context, activeKey string) (*core.Job, error)
	// Latest returns the job with the highest attempt of the template, or
	// core.ErrNotFound.
	Latest(ctx context.Context, templateID string) (*core.Job, error)
	// ListByTemplate returns the template's jobs ordered by attempt.
	ListByTemplate(ctx context.Context, templateID string) ([]*core.Job, error)
	// Update reads the job, calls fn on a copy and writes the copy back with
	// one conditional UPDATE guarded by the status and updated_at that were
	// read (compare-and-set). If another writer got there first, the job is
	// read again and fn called again (bounded). An error from fn aborts
	// without writing and is returned as is. An empty ActiveKey is written as
	// NULL in the same statement, so a job leaves invariant I1's window
	// atomically with becoming terminal. UpdatedAt always moves forward, which
	// makes an unchanged Update a heartbeat.
	Update(ctx context.Context, jobID string, fn func(*core.Job) error) (*core.Job, error)
	// ListStale returns jobs matching q, oldest first (newest first with
	// q.NewestFirst); among rows updated at the same instant, in the order
	// they were inserted (reversed with NewestFirst).
	ListStale(ctx context.Context, q StaleQuery) ([]*core.Job, error)
	// DeleteByTemplate removes every job of the template and returns how many.
	DeleteByTemplate(ctx context.Context, templateID string) (int, error)
}

// TemplateRepository stores definitions and replicas.
type TemplateRepository interface {
	// GetDefinition returns the definition or core.ErrNotFound.
	GetDefinition(ctx context.Context, templateID string) (*core.Definition, error)
	// GetDefinitionByAlias returns the definition holding alias or
	// core.ErrNotFound. Aliases compare byte for byte, but two aliases that
	// differ only in letter case cannot both exist (upstream keeps aliases
	// behind a case-folded unique key): the second one's create or update
	// fails with core.ErrConflict. (Core accepts lowercase aliases only.)
	GetDefinitionByAlias(ctx context.Context, alias string) (*core.Definition, error)
	// ListDefinitions returns all definitions ordered by template id.
	ListDefinitions(ctx context.Context) ([]*core.Definition, error)
	// CreateDefinition inserts def; core.ErrConflict if the id or the alias
	// is taken.
	CreateDefinition(ctx context.Context, def *core.Definition) error
	// UpdateDefinition reads, applies fn under a row lock and writes back;
	// core.ErrConflict if the new alias is taken.
	UpdateDefinition(ctx context.Context, templateID string, fn func(*core.Definition) error) (*core.Definition, error)
	// DeleteDefinition removes the definition; deleting a missing one is not
	// an error.
	DeleteDefinition(ctx context.Context, templateID string) error

	// UpsertReplica inserts or replaces the (template id, node id) row.
	UpsertReplica(ctx context.Context, r *core.Replica) error
	// SetReplicaCompat writes only the compat verdict of the (template id,
	// node id) row, so a scan never overwrites a job's concurrent upsert;
	// core.ErrNotFound if the row is gone.
	SetReplicaCompat(ctx context.Context, templateID, nodeID string, status core.CompatStatus, checkedUnix int64) error
	// ListReplicas returns the template's replicas ordered by node id.
	ListReplicas(ctx context.Context, templateID string) ([]*core.Replica, error)
	// ListReplicasByArtifact returns every replica bound to the artifact.
	ListReplicasByArtifact(ctx context.Context, artifactID string) ([]*core.Replica, error)
	// DeleteReplicas removes the template's replicas on nodeIDs (all of them
	// when nodeIDs is empty) and returns how many.
	DeleteReplicas(ctx context.Context, templateID string, nodeIDs ...string) (int, error)
}

// ArtifactRepository stores t_cube_rootfs_artifact rows.
type ArtifactRepository interface {
	// Get returns the artifact or core.ErrNotFound.
	Get(ctx context.Context, artifactID string) (*core.Artifact, error)
	// GetByFingerprint returns the artifact of a spec or core.ErrNotFound.
	GetByFingerprint(ctx context.Context, fingerprint string) (*core.Artifact, error)
	// Create inserts a; core.ErrConflict if its id or fingerprint exists.
	Create(ctx context.Context, a *core.Artifact) error
	// Update reads the row under a lock (FOR UPDATE where the database has
	// it), applies fn and writes it back.
	Update(ctx context.Context, artifactID string, fn func(*core.Artifact) error) (*core.Artifact, error)
	// Delete removes the row; a missing row is not an error.
	Delete(ctx context.Context, artifactID string) error
	// ListByStatus returns up to limit artifacts in status whose updated_at
	// is older than updatedBefore (zero time: no age filter), oldest
	// updated_at first.
	ListByStatus(ctx context.Context, status core.ArtifactStatus, updatedBefore time.Time, limit int) ([]*core.Artifact, error)
	// CountReferences counts what still needs the artifact: replicas bound
	// to it, jobs naming it that are not yet terminal (PENDING, RUNNING and
	// BUILT: a BUILT job's resume pipeline still distributes the artifact)
	// and definitions whose rootfs artifact it is, leaving out rows of
	// excludeTemplateID (an empty one leaves out nothing).
	CountReferences(ctx context.Context, artifactID, excludeTemplateID string) (int, error)
}

// PlacementRepository stores which nodes hold a copy of an artifact.
type PlacementRepository interface {
	// Add records p; adding an existing (artifact, node) pair updates its ip.
	Add(ctx context.Context, p core.Placement) error
	// List returns the artifact's placements ordered by node id.
	List(ctx context.Context, artifactID string) ([]core.Placement, error)
	// Delete removes the artifact's placements and returns how many.
	Delete(ctx context.Context, artifactID string) (int, error)
}

// PolicyRepository keeps the placement policy set through the API and the
// placement controller's recent decisions, so every master reads the same
// ones.
type PolicyRepository interface {
	// Policy returns the stored policy document and when it was set, or
	// core.ErrNotFound when none is stored.
	Policy(ctx context.Context) (doc string, setAt time.Time, err error)
	// SetPolicy replaces the stored document; an empty doc removes it.
	SetPolicy(ctx context.Context, doc string) error
	// AddDecision records d (the store stamps At) and then keeps only the
	// newest keep decisions of its template (keep <= 0 keeps them all).
	// Message is cut to core.MaxDecisionMessage bytes; an empty template id
	// or decision wraps core.ErrInvalidArgument.
	AddDecision(ctx context.Context, d core.PlacementDecision, keep int) error
	// Decisions returns the template's decisions, newest first, at most
	// limit (<= 0: all).
	Decisions(ctx context.Context, templateID string, limit int) ([]core.PlacementDecision, error)
}

// NodeRecord is a node registered in the database (t_cube_template_node).
// The node directory merges these rows with its configured list.
type NodeRecord struct {
	NodeID string
	NodeIP string
	// GRPCAddr is the node agent's gRPC address (host:port).
	GRPCAddr     string
	InstanceType string
	// Disabled takes the node out of the directory, even when the
	// configuration lists it.
	Disabled  bool
	CreatedAt time.Time
	UpdatedAt time.Time
}

// NodeRepository stores t_cube_template_node rows.
type NodeRepository interface {
	// List returns every row, disabled ones included, ordered by node id.
	List(ctx context.Context) ([]NodeRecord, error)
	// Upsert inserts n, or overwrites every field of the row with the same
	// node id except CreatedAt. The store sets CreatedAt and UpdatedAt. An
	// empty NodeID wraps core.ErrInvalidArgument and writes nothing.
	Upsert(ctx context.Context, n NodeRecord) error
	// Delete removes the row; deleting a missing one is not an error.
	Delete(ctx context.Context, nodeID string) error
}

// NameRepository keeps the one namespace template ids and aliases share
// (t_cube_template_name): a name means one template, whichever kind it is.
type NameRepository interface {
	// Claim records name as templateID's id or alias. Claiming a name the
	// template already holds as the same kind changes nothing. A name held
	// by another template, or by this one as the other kind, is refused with
	// a *core.NameTakenError (wrapping core.ErrConflict) naming the holder,
	// and nothing is written. An empty name or template id wraps
	// core.ErrInvalidArgument.
	Claim(ctx context.Context, name, templateID string, kind core.NameKind) error
	// Holder returns the template holding name and as what, or
	// core.ErrNotFound. Names compare as the database compares template
	// ids: byte for byte in a database this service created; in an
	// adopted upstream MySQL database, whose tables compare ids
	// case-insensitively, case-insensitively too, so that a name means the
	// same template here as in the template tables.
	Holder(ctx context.Context, name string) (templateID string, kind core.NameKind, err error)
	// Release removes templateID's names of kind (every kind when kind is
	// "") and returns how many.
	Release(ctx context.Context, templateID string, kind core.NameKind) (int, error)
	// Move makes alias templateID's alias and returns the template it took
	// it from: a name another template holds as its alias changes holder,
	// and the row remembers where it came from (Previous); a free name is
	// claimed and one templateID already holds as its alias is left as it
	// is (both return ""). A name held as an id, by any template, never
	// moves: *core.NameTakenError (wrapping core.ErrConflict), nothing
	// written. Other names of templateID are not touched. An empty alias
	// or template id wraps core.ErrInvalidArgument.
	Move(ctx context.Context, alias, templateID string) (from string, err error)
	// Previous returns the template name was last moved away from ("" for
	// a name claimed, not moved), or core.ErrNotFound when nobody holds
	// name.
	Previous(ctx context.Context, name string) (string, error)
}
