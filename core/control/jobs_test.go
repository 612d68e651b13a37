package control_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
)

// Two templates built from one spec share one artifact: a node holding
// both holds its bytes once.
func TestNodesUsageCountsSharedArtifactsOnce(t *testing.T) {
	e := newEnv(t, "node-1", "node-2")
	fp := testFingerprint("sha256:" + strings.Repeat("ab", 32))
	e.ready("tpl-a", fp)
	e.ready("tpl-b", fp)
	other := testFingerprint("sha256:" + strings.Repeat("cd", 32))
	e.ready("tpl-c", other)
	a, err := e.store.Artifacts().Get(e.ctx, aidOf(fp))
	if err != nil {
		t.Fatal(err)
	}
	c, err := e.store.Artifacts().Get(e.ctx, aidOf(other))
	if err != nil {
		t.Fatal(err)
	}
	usage, err := e.svc.NodesUsage(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := control.NodeUsage{Templates: 3, Bytes: a.Ext4SizeBytes + c.Ext4SizeBytes}
	for _, n := range []string{"node-1", "node-2"} {
		if usage[n] != want {
			t.Errorf("%s: %+v, want %+v", n, usage[n], want)
		}
	}
	if a.Ext4SizeBytes == 0 {
		t.Fatal("the test's artifact has no size")
	}
}

func TestListJobs(t *testing.T) {
	e := newEnv(t, "node-1")
	fp := testFingerprint("sha256:" + strings.Repeat("ef", 32))
	first := e.ready("tpl-a", fp)
	e.clock.Advance(time.Second)
	second := e.ready("tpl-b", fp)
	e.clock.Advance(time.Second)
	running := e.create(request("tpl-c"))
	tests := []struct {
		name string
		q    control.JobQuery
		want []string
	}{
		{"newest first", control.JobQuery{}, []string{running.JobID, second.JobID, first.JobID}},
		{"limit", control.JobQuery{Limit: 1}, []string{running.JobID}},
		{"unfinished", control.JobQuery{Unfinished: true}, []string{running.JobID}},
		{"one template", control.JobQuery{TemplateID: "tpl-a"}, []string{first.JobID}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := e.svc.ListJobs(e.ctx, tt.q)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, j := range got {
				ids = append(ids, j.JobID)
			}
			if len(ids) != len(tt.want) {
				t.Fatalf("got %v, want %v", ids, tt.want)
			}
			for i := range ids {
				if ids[i] != tt.want[i] {
					t.Fatalf("got %v, want %v", ids, tt.want)
				}
			}
		})
	}
	if _, err := e.svc.ListJobs(e.ctx, control.JobQuery{TemplateID: "bad id!"}); err == nil {
		t.Error("a malformed template id was accepted")
	}
}

// A migrate moves the artifact, not the copies: the listing keeps
// counting the replicas of the job that placed the template (it showed
// 0 / 0 after a merge).
func TestListAfterMigrateKeepsReplicaCounts(t *testing.T) {
	e := newEnv(t, "node-1")
	f := newMigrateFakes()
	e.withMigrate(f)
	e.legacyTemplate("tpl-m", fpA, f, true)
	before, err := e.svc.ListTemplates(e.ctx)
	if err != nil || len(before) != 1 {
		t.Fatalf("list: %v %+v", err, before)
	}
	if job := e.migrate("tpl-m"); job.Status != core.JobReady {
		t.Fatalf("migrate: %+v", job)
	}
	after, err := e.svc.ListTemplates(e.ctx)
	if err != nil || len(after) != 1 {
		t.Fatalf("list: %v %+v", err, after)
	}
	if after[0].ReadyNodes != before[0].ReadyNodes || after[0].TargetNodes != before[0].TargetNodes || after[0].TargetNodes == 0 {
		t.Errorf("after a merge: %d / %d, before %d / %d", after[0].ReadyNodes, after[0].TargetNodes, before[0].ReadyNodes, before[0].TargetNodes)
	}
}
