package core_test

import (
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
)

func intp(v int) *int       { return &v }
func strp(v string) *string { return &v }

// activeJob returns a job in the given state holding its I1 key.
func activeJob(st core.JobStatus, ph core.Phase, progress int) *core.Job {
	return &core.Job{
		JobID:      "job-1",
		TemplateID: "tpl-1",
		Status:     st,
		Phase:      ph,
		Progress:   progress,
		ActiveKey:  core.ActiveKeyFromImage("tpl-1"),
	}
}

func TestJobApplyLegalEdges(t *testing.T) {
	tests := []struct {
		name         string
		from         *core.Job
		u            core.JobUpdate
		wantStatus   core.JobStatus
		wantPhase    core.Phase
		wantProgress int
	}{
		{"pending heartbeat", activeJob(core.JobPending, core.PhasePulling, 0), core.JobUpdate{}, core.JobPending, core.PhasePulling, 0},
		{"pending to running", activeJob(core.JobPending, core.PhasePulling, 0), core.Progress(core.JobRunning, core.PhasePulling, 5), core.JobRunning, core.PhasePulling, 5},
		{"pending to built", activeJob(core.JobPending, core.PhasePulling, 0), core.Progress(core.JobBuilt, core.PhaseReady, 100), core.JobBuilt, core.PhaseReady, core.BuiltProgress},
		{"pending to failed", activeJob(core.JobPending, core.PhasePulling, 0), core.Fail(core.PhasePulling, "boom"), core.JobFailed, core.PhasePulling, 100},
		{"running next phase", activeJob(core.JobRunning, core.PhasePulling, 10), core.Progress(core.JobRunning, core.PhaseUnpacking, 20), core.JobRunning, core.PhaseUnpacking, 20},
		{"running same phase more progress", activeJob(core.JobRunning, core.PhasePulling, 10), core.Progress(core.JobRunning, core.PhasePulling, 15), core.JobRunning, core.PhasePulling, 15},
		{"running skips phases", activeJob(core.JobRunning, core.PhasePulling, 10), core.Progress(core.JobRunning, core.PhaseUploading, 60), core.JobRunning, core.PhaseUploading, 60},
		{"running without phase keeps phase", activeJob(core.JobRunning, core.PhaseUnpacking, 20), core.JobUpdate{Progress: intp(25)}, core.JobRunning, core.PhaseUnpacking, 25},
		{"running to built", activeJob(core.JobRunning, core.PhaseUploading, 60), core.Progress(core.JobBuilt, core.PhaseReady, 100), core.JobBuilt, core.PhaseReady, core.BuiltProgress},
		{"running to ready", activeJob(core.JobRunning, core.PhaseRegistering, 95), core.JobUpdate{Status: core.JobReady, Phase: core.PhaseReady}, core.JobReady, core.PhaseReady, 100},
		{"running to failed", activeJob(core.JobRunning, core.PhaseBuildingExt4, 40), core.Fail(core.PhaseBuildingExt4, "mkfs"), core.JobFailed, core.PhaseBuildingExt4, 100},
		{"built to running distributing", activeJob(core.JobBuilt, core.PhaseReady, 80), core.Progress(core.JobRunning, core.PhaseDistributing, 85), core.JobRunning, core.PhaseDistributing, 85},
		{"built to running snapshotting", activeJob(core.JobBuilt, core.PhaseReady, 80), core.Progress(core.JobRunning, core.PhaseSnapshotting, 92), core.JobRunning, core.PhaseSnapshotting, 92},
		{"built to ready", activeJob(core.JobBuilt, core.PhaseReady, 100), core.JobUpdate{Status: core.JobReady}, core.JobReady, core.PhaseReady, 100},
		{"built to failed", activeJob(core.JobBuilt, core.PhaseReady, 100), core.Fail(core.PhaseDistributing, "no nodes"), core.JobFailed, core.PhaseDistributing, 100},
		{"resume pipeline advances", activeJob(core.JobRunning, core.PhaseDistributing, 70), core.Progress(core.JobRunning, core.PhaseCreatingTemplate, 85), core.JobRunning, core.PhaseCreatingTemplate, 85},
		{"resume pipeline to ready", activeJob(core.JobRunning, core.PhaseSnapshotting, 90), core.JobUpdate{Status: core.JobReady, Phase: core.PhaseReady}, core.JobReady, core.PhaseReady, 100},
		{"resume pipeline to failed", activeJob(core.JobRunning, core.PhaseDistributing, 70), core.Fail(core.PhaseDistributing, "all nodes failed"), core.JobFailed, core.PhaseDistributing, 100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := tc.from
			if err := j.Apply(tc.u); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if j.Status != tc.wantStatus || j.Phase != tc.wantPhase || j.Progress != tc.wantProgress {
				t.Errorf("got %s/%s/%d, want %s/%s/%d", j.Status, j.Phase, j.Progress, tc.wantStatus, tc.wantPhase, tc.wantProgress)
			}
			wantKey := core.ActiveKeyFromImage("tpl-1")
			if tc.wantStatus.Terminal() {
				wantKey = ""
			}
			if j.ActiveKey != wantKey {
				t.Errorf("ActiveKey = %q, want %q", j.ActiveKey, wantKey)
			}
		})
	}
}

// Refused updates leave the job exactly as it was.
func TestJobApplyRefused(t *testing.T) {
	stale := core.ErrStaleUpdate
	tests := []struct {
		name string
		from *core.Job
		u    core.JobUpdate
		want error
	}{
		// Skipping the build is a programming error, not a late report.
		{"pending to ready", activeJob(core.JobPending, core.PhasePulling, 0), core.JobUpdate{Status: core.JobReady}, core.ErrInvalidTransition},

		// Backwards in status.
		{"running to pending", activeJob(core.JobRunning, core.PhaseUnpacking, 20), core.JobUpdate{Status: core.JobPending}, stale},
		{"built to pending", activeJob(core.JobBuilt, core.PhaseReady, 100), core.JobUpdate{Status: core.JobPending}, stale},

		// Backwards in phase within a status.
		{"running uploading then building_ext4", activeJob(core.JobRunning, core.PhaseUploading, 60), core.Progress(core.JobRunning, core.PhaseBuildingExt4, 40), stale},
		{"running unpacking then pulling", activeJob(core.JobRunning, core.PhaseUnpacking, 20), core.Progress(core.JobRunning, core.PhasePulling, 10), stale},
		{"resume pipeline then build phase", activeJob(core.JobRunning, core.PhaseDistributing, 70), core.Progress(core.JobRunning, core.PhaseUploading, 60), stale},
		{"resume pipeline backwards", activeJob(core.JobRunning, core.PhaseSnapshotting, 90), core.Progress(core.JobRunning, core.PhaseDistributing, 70), stale},

		// Build reports after BUILT.
		{"built then running pulling", activeJob(core.JobBuilt, core.PhaseReady, 100), core.Progress(core.JobRunning, core.PhasePulling, 10), stale},
		{"built then running uploading", activeJob(core.JobBuilt, core.PhaseReady, 100), core.Progress(core.JobRunning, core.PhaseUploading, 60), stale},
		{"built then running without phase", activeJob(core.JobBuilt, core.PhaseReady, 100), core.JobUpdate{Status: core.JobRunning}, stale},

		// A retried BUILT report arriving after the resume pipeline started
		// must not send the job back to BUILT (and replay the resume).
		{"resume pipeline then built", activeJob(core.JobRunning, core.PhaseDistributing, 70), core.Progress(core.JobBuilt, core.PhaseReady, 100), stale},
		{"resume snapshotting then built", activeJob(core.JobRunning, core.PhaseSnapshotting, 90), core.Progress(core.JobBuilt, core.PhaseReady, 100), stale},
		{"duplicate built report", activeJob(core.JobBuilt, core.PhaseReady, 100), core.Progress(core.JobBuilt, core.PhaseReady, 100), stale},

		// Unknown values.
		{"unknown status", activeJob(core.JobRunning, core.PhasePulling, 10), core.JobUpdate{Status: "DONE"}, core.ErrInvalidArgument},
		{"lowercase status", activeJob(core.JobRunning, core.PhasePulling, 10), core.JobUpdate{Status: "running"}, core.ErrInvalidArgument},
		{"unknown phase", activeJob(core.JobRunning, core.PhasePulling, 10), core.JobUpdate{Phase: "COOKING"}, core.ErrInvalidArgument},
	}
	// Terminal states absorb everything.
	for _, st := range []core.JobStatus{core.JobReady, core.JobFailed} {
		for _, u := range []core.JobUpdate{
			{},
			{Status: core.JobRunning, Phase: core.PhaseDistributing},
			{Status: core.JobPending},
			{Status: core.JobBuilt, Phase: core.PhaseReady},
			{Status: core.JobReady, Phase: core.PhaseReady},
			core.Fail(core.PhaseUploading, "late failure"),
			{Progress: intp(50), ErrorMessage: strp("x"), ArtifactID: "rfs-x"},
		} {
			j := activeJob(st, core.PhaseReady, 100)
			j.ActiveKey = ""
			tests = append(tests, struct {
				name string
				from *core.Job
				u    core.JobUpdate
				want error
			}{"terminal " + string(st) + " then " + string(u.Status) + "/" + string(u.Phase), j, u, stale})
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.from.Clone()
			err := tc.from.Apply(tc.u)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Apply: %v, want an error wrapping %v", err, tc.want)
			}
			if !reflect.DeepEqual(tc.from, before) {
				t.Errorf("refused update changed the job:\n got %+v\nwant %+v", tc.from, before)
			}
		})
	}
}

func TestJobApplyErrorTypes(t *testing.T) {
	j := activeJob(core.JobPending, core.PhasePulling, 0)
	err := j.Apply(core.JobUpdate{Status: core.JobReady})
	var te *core.TransitionError
	if !errors.As(err, &te) || te.From != core.JobPending || te.To != core.JobReady || te.JobID != "job-1" {
		t.Fatalf("PENDING -> READY: %v (%T), want *core.TransitionError PENDING -> READY", err, err)
	}
	if errors.Is(err, core.ErrStaleUpdate) {
		t.Error("PENDING -> READY must not be treated as a harmless stale update")
	}

	err = activeJob(core.JobRunning, core.PhasePulling, 0).Apply(core.JobUpdate{Phase: "COOKING"})
	var fe *core.FieldError
	if !errors.As(err, &fe) || fe.Field != "phase" {
		t.Errorf("unknown phase: %v, want *core.FieldError on phase", err)
	}
	err = activeJob(core.JobRunning, core.PhasePulling, 0).Apply(core.JobUpdate{Status: "DONE"})
	if !errors.As(err, &fe) || fe.Field != "status" {
		t.Errorf("unknown status: %v, want *core.FieldError on status", err)
	}
}

func TestJobApplyProgress(t *testing.T) {
	tests := []struct {
		name string
		from *core.Job
		u    core.JobUpdate
		want int
	}{
		{"never decreases within a status", activeJob(core.JobRunning, core.PhasePulling, 30), core.Progress(core.JobRunning, core.PhasePulling, 20), 30},
		{"never decreases across phases of a status", activeJob(core.JobRunning, core.PhasePulling, 30), core.Progress(core.JobRunning, core.PhaseUnpacking, 20), 30},
		{"not touched without a value", activeJob(core.JobRunning, core.PhasePulling, 30), core.JobUpdate{Phase: core.PhaseUnpacking}, 30},
		{"equal is fine", activeJob(core.JobRunning, core.PhasePulling, 30), core.Progress(core.JobRunning, core.PhasePulling, 30), 30},
		{"never decreases from one status to the next", activeJob(core.JobBuilt, core.PhaseReady, 80), core.Progress(core.JobRunning, core.PhaseDistributing, 70), 80},
		{"uploading 80 stays 80 when BUILT reports 100", activeJob(core.JobRunning, core.PhaseUploading, 80), core.Progress(core.JobBuilt, core.PhaseReady, 100), core.BuiltProgress},
		{"distribution goes on from BUILT", activeJob(core.JobBuilt, core.PhaseReady, 80), core.Progress(core.JobRunning, core.PhaseDistributing, 85), 85},
		{"clamped above", activeJob(core.JobRunning, core.PhasePulling, 30), core.Progress(core.JobRunning, core.PhasePulling, 150), 100},
		{"clamped below on a new status", activeJob(core.JobPending, core.PhasePulling, 0), core.Progress(core.JobRunning, core.PhasePulling, -5), 0},
		{"ready is 100", activeJob(core.JobRunning, core.PhaseRegistering, 95), core.JobUpdate{Status: core.JobReady, Progress: intp(50)}, 100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.from.Apply(tc.u); err != nil {
				t.Fatal(err)
			}
			if tc.from.Progress != tc.want {
				t.Errorf("progress = %d, want %d", tc.from.Progress, tc.want)
			}
		})
	}
}

func TestJobApplyCopiesReportedFields(t *testing.T) {
	j := activeJob(core.JobRunning, core.PhaseUnpacking, 20)
	j.ArtifactID = "rfs-keep"
	pull := core.PullProgress{TotalBytes: 10, DownloadedBytes: 5, TotalLayers: 2, CompletedLayers: 1, SpeedBPS: 3}
	err := j.Apply(core.JobUpdate{
		Fingerprint:       "fp",
		SourceImageDigest: "sha256:d",
		ArtifactStatus:    "READY",
		TemplateStatus:    "PENDING",
		ResultJSON:        "{}",
		ErrorMessage:      strp("warn"),
		ExpectedNodeCount: intp(3),
		ReadyNodeCount:    intp(2),
		FailedNodeCount:   intp(1),
		Pull:              &pull,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := activeJob(core.JobRunning, core.PhaseUnpacking, 20)
	want.ArtifactID = "rfs-keep" // empty strings leave fields alone
	want.Fingerprint, want.SourceImageDigest, want.ArtifactStatus = "fp", "sha256:d", "READY"
	want.TemplateStatus, want.ResultJSON, want.ErrorMessage = "PENDING", "{}", "warn"
	want.ExpectedNodeCount, want.ReadyNodeCount, want.FailedNodeCount = 3, 2, 1
	want.Pull = pull
	if !reflect.DeepEqual(j, want) {
		t.Errorf("got  %+v\nwant %+v", j, want)
	}
}

func TestJobStatusAndPhaseParsing(t *testing.T) {
	for _, s := range []string{"PENDING", "RUNNING", "BUILT", "READY", "FAILED"} {
		if _, err := core.ParseJobStatus(s); err != nil {
			t.Errorf("ParseJobStatus(%q): %v", s, err)
		}
	}
	for _, s := range []string{"", "pending", "DONE"} {
		if _, err := core.ParseJobStatus(s); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("ParseJobStatus(%q): %v, want ErrInvalidArgument", s, err)
		}
	}
	for _, s := range []string{"", "PULLING", "DISTRIBUTING", "READY"} {
		if _, err := core.ParsePhase(s); err != nil {
			t.Errorf("ParsePhase(%q): %v", s, err)
		}
	}
	if _, err := core.ParsePhase("pulling"); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("ParsePhase(pulling): %v, want ErrInvalidArgument", err)
	}
	for _, tc := range []struct {
		p    core.Phase
		post bool
	}{{core.PhasePulling, false}, {core.PhaseUploading, false}, {core.PhaseMigrating, false}, {core.PhaseDistributing, true}, {core.PhaseReady, true}, {"", false}} {
		if got := tc.p.PostBuild(); got != tc.post {
			t.Errorf("%q.PostBuild() = %v, want %v", tc.p, got, tc.post)
		}
	}
	for _, tc := range []struct {
		s                core.JobStatus
		active, terminal bool
	}{{core.JobPending, true, false}, {core.JobRunning, true, false}, {core.JobBuilt, false, false}, {core.JobReady, false, true}, {core.JobFailed, false, true}} {
		if tc.s.Active() != tc.active || tc.s.Terminal() != tc.terminal {
			t.Errorf("%s: Active=%v Terminal=%v, want %v %v", tc.s, tc.s.Active(), tc.s.Terminal(), tc.active, tc.terminal)
		}
		if unfinished := slices.Contains(core.UnfinishedJobStatuses(), tc.s); tc.s.Unfinished() != unfinished || unfinished == tc.terminal {
			t.Errorf("%s: Unfinished=%v, listed %v, Terminal=%v: every status is unfinished or terminal, never both", tc.s, tc.s.Unfinished(), unfinished, tc.terminal)
		}
	}
	if core.JobStatus("").Unfinished() {
		t.Error("the empty status counts as unfinished")
	}
}

func TestJobCloneIsDeep(t *testing.T) {
	j := &core.Job{RedoScope: []string{"a", "b"}}
	c := j.Clone()
	c.RedoScope[0] = "z"
	if j.RedoScope[0] != "a" {
		t.Error("Clone shares RedoScope with the original")
	}
}

func TestJobApplyMergesPhaseDurations(t *testing.T) {
	j := activeJob(core.JobRunning, core.PhaseBuildingExt4, 40)
	steps := []core.PhaseDurations{
		{core.PhasePulling: 3 * time.Second},
		{core.PhaseUnpacking: 0, core.PhasePulling: 4 * time.Second},
		{core.PhaseBuildingExt4: -time.Second},
	}
	for _, d := range steps {
		if err := j.Apply(core.JobUpdate{PhaseDurations: d}); err != nil {
			t.Fatal(err)
		}
	}
	want := core.PhaseDurations{core.PhasePulling: 4 * time.Second, core.PhaseUnpacking: 0, core.PhaseBuildingExt4: 0}
	if !maps.Equal(j.PhaseDurations, want) {
		t.Errorf("durations %v, want %v (merged, a phase named again replaced, never negative)", j.PhaseDurations, want)
	}
	before := j.Clone()
	if err := j.Apply(core.JobUpdate{Phase: core.PhaseUploading, PhaseDurations: core.PhaseDurations{"NAPPING": time.Second}}); err == nil {
		t.Fatal("a duration of an unknown phase was accepted")
	}
	if j.Phase != before.Phase || !maps.Equal(j.PhaseDurations, before.PhaseDurations) {
		t.Errorf("a refused update changed the job: %s %v", j.Phase, j.PhaseDurations)
	}
	b, err := json.Marshal(want)
	if err != nil || string(b) != `{"BUILDING_EXT4":0,"PULLING":4000,"UNPACKING":0}` {
		t.Errorf("JSON %s %v, want milliseconds by phase", b, err)
	}
}
