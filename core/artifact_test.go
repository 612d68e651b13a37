package core_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
)

var artifactStatuses = []core.ArtifactStatus{
	core.ArtifactPending, core.ArtifactBuilding, core.ArtifactReady,
	core.ArtifactFailed, core.ArtifactCleanupPending, core.ArtifactDeleting,
}

// allowedArtifactMoves is the artifact state machine written out edge by
// edge; every pair not listed (other than staying put) must be refused.
var allowedArtifactMoves = map[[2]core.ArtifactStatus]bool{
	{core.ArtifactPending, core.ArtifactBuilding}:        true,
	{core.ArtifactPending, core.ArtifactReady}:           true,
	{core.ArtifactPending, core.ArtifactFailed}:          true,
	{core.ArtifactPending, core.ArtifactCleanupPending}:  true,
	{core.ArtifactBuilding, core.ArtifactReady}:          true,
	{core.ArtifactBuilding, core.ArtifactFailed}:         true,
	{core.ArtifactReady, core.ArtifactBuilding}:          true, // rebuild of missing bytes
	{core.ArtifactReady, core.ArtifactCleanupPending}:    true,
	{core.ArtifactReady, core.ArtifactFailed}:            true,
	{core.ArtifactFailed, core.ArtifactPending}:          true,
	{core.ArtifactFailed, core.ArtifactBuilding}:         true,
	{core.ArtifactFailed, core.ArtifactCleanupPending}:   true,
	{core.ArtifactFailed, core.ArtifactDeleting}:         true,
	{core.ArtifactCleanupPending, core.ArtifactReady}:    true, // re-referenced before deletion
	{core.ArtifactCleanupPending, core.ArtifactDeleting}: true,
	{core.ArtifactDeleting, core.ArtifactCleanupPending}: true, // deletion failed, retry later
}

func TestArtifactStateMachine(t *testing.T) {
	for _, from := range artifactStatuses {
		for _, to := range artifactStatuses {
			t.Run(fmt.Sprintf("%s->%s", from, to), func(t *testing.T) {
				want := from == to || allowedArtifactMoves[[2]core.ArtifactStatus{from, to}]
				if got := from.CanMoveTo(to); got != want {
					t.Fatalf("CanMoveTo = %v, want %v", got, want)
				}
				a := &core.Artifact{ArtifactID: "rfs-1", Status: from}
				err := a.MoveTo(to)
				switch {
				case want && err != nil:
					t.Errorf("MoveTo: %v", err)
				case want && a.Status != to:
					t.Errorf("status = %s after MoveTo(%s)", a.Status, to)
				case !want && !errors.Is(err, core.ErrInvalidTransition):
					t.Errorf("MoveTo: %v, want ErrInvalidTransition", err)
				case !want && a.Status != from:
					t.Errorf("refused MoveTo changed status to %s", a.Status)
				}
			})
		}
	}
	if core.ArtifactStatus("BOGUS").CanMoveTo(core.ArtifactReady) {
		t.Error("unknown status may move")
	}
}

func TestParseArtifactStatus(t *testing.T) {
	for _, s := range artifactStatuses {
		if got, err := core.ParseArtifactStatus(string(s)); err != nil || got != s {
			t.Errorf("ParseArtifactStatus(%s) = %s, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "ready", "GONE"} {
		if _, err := core.ParseArtifactStatus(s); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("ParseArtifactStatus(%q): %v, want ErrInvalidArgument", s, err)
		}
	}
}
