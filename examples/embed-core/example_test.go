package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/core"
)

// TestRun runs the example and then checks what it left in the database,
// so the test does not rely on the printout alone.
func TestRun(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "tc.db")
	var out bytes.Buffer
	if err := run(ctx, &out, db); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	for _, want := range []string{
		"(created=true)",
		"(created=false)",
		"different: refused: template tpl-embed-demo is currently PENDING (job_id=",
		"late RUNNING/PULLING 30%:   ignored (stale)  -> job RUNNING/BUILDING_EXT4 60%",
		"late RUNNING/UPLOADING 90%: ignored (stale)  -> job FAILED/BUILDING_EXT4 100%",
		"attempt 2 PENDING (retry of ",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}

	store, err := entstore.Open(ctx, "sqlite://"+db)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	list, err := store.Jobs().ListByTemplate(ctx, "tpl-embed-demo")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 {
		t.Fatalf("%d jobs in the database, want 2 (the resubmit must not add one)", len(list))
	}
	failed, retry := list[0], list[1]
	if failed.Status != core.JobFailed || failed.Phase != core.PhaseBuildingExt4 || failed.ErrorMessage != "demo: disk full" || failed.ActiveKey != "" {
		t.Errorf("first job = %s/%s %q active_key=%q, want FAILED/BUILDING_EXT4 with the error and no active key",
			failed.Status, failed.Phase, failed.ErrorMessage, failed.ActiveKey)
	}
	if retry.Status != core.JobPending || retry.AttemptNo != 2 || retry.RetryOfJobID != failed.JobID || retry.WritableLayerSize != "2Gi" {
		t.Errorf("second job = %s attempt %d retry_of %q size %s, want PENDING attempt 2 retrying %s with 2Gi",
			retry.Status, retry.AttemptNo, retry.RetryOfJobID, retry.WritableLayerSize, failed.JobID)
	}
}
