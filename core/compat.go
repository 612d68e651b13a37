package core

import (
	"fmt"
	"time"
)

// CompatStatus is the verdict on a replica's recorded component versions
// against the release manifest.
type CompatStatus string

// Compat statuses.
const (
	// CompatCompatible: every recorded version equals the manifest's.
	CompatCompatible CompatStatus = "COMPATIBLE"
	// CompatIncompatible: at least one recorded version differs.
	CompatIncompatible CompatStatus = "INCOMPATIBLE"
	// CompatUnknown: no manifest, or nothing recorded to compare.
	CompatUnknown CompatStatus = "UNKNOWN"
)

// Component names, as keys of ReleaseManifest.Components and of
// ReplicaComponents.
const (
	ComponentGuestImage = "guest_image"
	ComponentAgent      = "agent"
	ComponentKernel     = "kernel"
	ComponentShim       = "shim"
)

// ComponentNames lists the components in report order.
var ComponentNames = []string{ComponentGuestImage, ComponentAgent, ComponentKernel, ComponentShim}

// ReleaseManifest is the part of the release manifest that compat reads:
// the component versions the installed release declares.
type ReleaseManifest struct {
	Components map[string]string `json:"components"`
}

// ReplicaComponents returns the replica's non-empty recorded versions by
// component name.
func ReplicaComponents(r *Replica) map[string]string {
	out := map[string]string{}
	for name, v := range map[string]string{
		ComponentGuestImage: r.GuestImageVersion,
		ComponentAgent:      r.AgentVersion,
		ComponentKernel:     r.KernelVersion,
		ComponentShim:       r.ShimVersion,
	} {
		if v != "" {
			out[name] = v
		}
	}
	return out
}

// Evaluate compares the replica's recorded versions with the manifest.
// A nil manifest, or a replica with no recorded version, gives UNKNOWN.
// Only components both sides name are compared: a version the node did
// not report, or the manifest does not declare, proves nothing either way.
// It returns one reason per differing component, in ComponentNames order.
func Evaluate(m *ReleaseManifest, r *Replica) (CompatStatus, []string) {
	if m == nil {
		return CompatUnknown, nil
	}
	got := ReplicaComponents(r)
	compared := 0
	var reasons []string
	for _, name := range ComponentNames {
		have, want := got[name], m.Components[name]
		if have == "" || want == "" {
			continue
		}
		compared++
		if have != want {
			reasons = append(reasons, fmt.Sprintf("node %s: %s %s, release declares %s", r.NodeID, name, have, want))
		}
	}
	switch {
	case len(reasons) > 0:
		return CompatIncompatible, reasons
	case compared == 0:
		return CompatUnknown, nil
	}
	return CompatCompatible, nil
}

// SummarizeCompat folds replica verdicts into a template verdict:
// INCOMPATIBLE if any is, COMPATIBLE if all are, UNKNOWN otherwise.
func SummarizeCompat(ss []CompatStatus) CompatStatus {
	ok := 0
	for _, s := range ss {
		switch s {
		case CompatIncompatible:
			return CompatIncompatible
		case CompatCompatible:
			ok++
		}
	}
	if len(ss) > 0 && ok == len(ss) {
		return CompatCompatible
	}
	return CompatUnknown
}

// CompatReport is a compat scan: each template's recorded component
// versions checked against the release manifest, if one is installed.
type CompatReport struct {
	// ManifestSource says where the manifest was looked for; ManifestFound
	// whether it was there.
	ManifestSource string
	ManifestFound  bool
	// Declared are the component versions the manifest declares.
	Declared map[string]string
	// CheckedAt is the newest verdict's time (zero: never scanned).
	CheckedAt time.Time
	Templates []TemplateCompat
}

// TemplateCompat is one template's entry. Components are set when every
// replica recorded the same versions; Replicas always has the detail.
type TemplateCompat struct {
	TemplateID string
	Components map[string]string
	Status     CompatStatus
	Reasons    []string
	Replicas   []ReplicaCompat
}

// ReplicaCompat is one node's copy of a template: the versions the node
// recorded and the last verdict on them.
type ReplicaCompat struct {
	NodeID     string
	Components map[string]string
	Status     CompatStatus
	CheckedAt  time.Time
}
