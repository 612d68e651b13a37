package core

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// TemplateStatus is the status of a template definition.
type TemplateStatus string

// Template statuses.
const (
	TemplatePending        TemplateStatus = "PENDING"
	TemplateReady          TemplateStatus = "READY"
	TemplatePartiallyReady TemplateStatus = "PARTIALLY_READY"
	TemplateFailed         TemplateStatus = "FAILED"
)

// DefaultTemplateVersion is the only template version this service writes.
const DefaultTemplateVersion = "v2"

// Definition is a row of t_cube_template_definition.
type Definition struct {
	TemplateID       string
	InstanceType     string
	Version          string
	Status           TemplateStatus
	RequestJSON      string // the stored sandbox create request
	LastError        string
	Alias            string // "" when unset
	RootfsArtifactID string
	CreatedAt        time.Time
	UpdatedAt        time.Time
}

// ReplicaStatus is a replica's coarse status (upstream writes only these two).
type ReplicaStatus string

// Replica statuses.
const (
	ReplicaReady  ReplicaStatus = "READY"
	ReplicaFailed ReplicaStatus = "FAILED"
)

// ReplicaPhase is a replica's step on its node.
type ReplicaPhase string

// Replica phases.
const (
	ReplicaPhasePending      ReplicaPhase = "PENDING"
	ReplicaPhaseDistributing ReplicaPhase = "DISTRIBUTING"
	ReplicaPhaseDistributed  ReplicaPhase = "DISTRIBUTED"
	ReplicaPhaseSnapshotting ReplicaPhase = "SNAPSHOTTING"
	ReplicaPhaseReady        ReplicaPhase = "READY"
	ReplicaPhaseFailed       ReplicaPhase = "FAILED"
	ReplicaPhaseCleaning     ReplicaPhase = "CLEANING"
)

// Replica is a row of t_cube_template_replica: a template on one node.
type Replica struct {
	TemplateID      string
	NodeID          string
	NodeIP          string
	InstanceType    string
	Spec            string
	SnapshotPath    string
	Status          ReplicaStatus
	Phase           ReplicaPhase
	ArtifactID      string
	LastJobID       string
	LastErrorPhase  string
	CleanupRequired bool
	ErrorMessage    string
	// Component versions the node reported when it built the snapshot
	// (empty when the node did not say), and the last compat verdict on
	// them (see Evaluate) with its unix time; both zero until a scan.
	GuestImageVersion string
	AgentVersion      string
	KernelVersion     string
	ShimVersion       string
	CompatStatus      CompatStatus
	CompatCheckedUnix int64
	CreatedAt         time.Time
	UpdatedAt         time.Time
}

// SummarizeReplicas gives the template status over all replica rows:
// READY when all are ready, PARTIALLY_READY when some are, FAILED otherwise.
func SummarizeReplicas(rs []Replica) TemplateStatus {
	ready := 0
	for _, r := range rs {
		if r.Status == ReplicaReady {
			ready++
		}
	}
	switch {
	case len(rs) > 0 && ready == len(rs):
		return TemplateReady
	case ready > 0:
		return TemplatePartiallyReady
	default:
		return TemplateFailed
	}
}

// MaxAliasLen is the longest alias.
const MaxAliasLen = 64

var aliasPattern = regexp.MustCompile(`^[a-z0-9-]+$`)

// ValidateAlias checks an alias: [a-z0-9-], at most 64 characters, and not
// shaped like a generated id (tpl-, snap-, rfs-), so that an alias can never
// shadow a template id.
func ValidateAlias(alias string) error {
	if len(alias) > MaxAliasLen {
		return fieldErr("alias", "longer than %d characters", MaxAliasLen)
	}
	if !aliasPattern.MatchString(alias) {
		return fieldErr("alias", "%q may hold only a-z, 0-9 and '-'", alias)
	}
	for _, p := range []string{"tpl-", "snap-", "rfs-"} {
		if strings.HasPrefix(alias, p) {
			return fieldErr("alias", "%q must not start with %s", alias, p)
		}
	}
	return nil
}

// ValidateNewAlias is ValidateAlias for an alias being set: it also may
// not start or end with '-' (a leading one reads as a command-line flag).
// Aliases set before this rule still resolve (ValidateAlias).
func ValidateNewAlias(alias string) error {
	if err := ValidateAlias(alias); err != nil {
		return err
	}
	if strings.HasPrefix(alias, "-") || strings.HasSuffix(alias, "-") {
		return fieldErr("alias", "%q must not start or end with '-'", alias)
	}
	return nil
}

// NormalizeAlias interprets the alias of a PUT alias body: absent, null and
// "" all clear it (returned as ""); anything else must be valid.
func NormalizeAlias(alias *string) (string, error) {
	if alias == nil || *alias == "" {
		return "", nil
	}
	if err := ValidateNewAlias(*alias); err != nil {
		return "", err
	}
	return *alias, nil
}

// NameKind says what a name in the template namespace is.
type NameKind string

// Name kinds.
const (
	NameID    NameKind = "id"
	NameAlias NameKind = "alias"
)

// NameTakenError refuses a template id or alias already held by another
// template (or by this one as the other kind). It wraps ErrConflict.
type NameTakenError struct {
	Name       string
	Holder     string // the template that holds it
	HolderKind NameKind
}

func (e *NameTakenError) Error() string {
	return fmt.Sprintf("%q is already the %s of template %s", e.Name, e.HolderKind, e.Holder)
}

// Unwrap makes errors.Is(err, ErrConflict) true.
func (e *NameTakenError) Unwrap() error { return ErrConflict }
