package storetest

import (
	"errors"
	"sync"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
)

var submitTests = []test{
	{"Submit/I1ConcurrentIdenticalRequests", testSubmitConcurrent},
	{"Submit/DifferentRequestWhileActive", testSubmitDifferent},
}

// Submitters is how many goroutines race in the I1 tests.
const Submitters = 32

// FromImageRequest returns a valid request for templateID; variant changes
// the image so that two variants are different requests.
func FromImageRequest(templateID, variant string) *core.FromImageRequest {
	return &core.FromImageRequest{
		RequestID:         ids.NewJobID(), // not part of the idempotency key
		SourceImageRef:    "registry.example/team/app:" + variant,
		RegistryPassword:  "secret",
		TemplateID:        templateID,
		WritableLayerSize: "1Gi",
		ExposedPorts:      []int32{8080, 9000},
	}
}

func testSubmitConcurrent(t *testing.T, e *env) {
	svc := &control.Service{Store: e.s, IDs: ids}
	tpl := uniq("tpl-i1-")
	results := make([]control.SubmitResult, Submitters)
	errs := make([]error, Submitters)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range Submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := FromImageRequest(tpl, "1.0")
			<-start
			results[i], errs[i] = svc.SubmitFromImage(e.ctx, req)
		}()
	}
	close(start)
	wg.Wait()

	created := 0
	for i := range Submitters {
		must(t, errs[i], "SubmitFromImage")
		if results[i].Created {
			created++
		}
		if results[i].Job.JobID != results[0].Job.JobID {
			t.Fatalf("submitter %d got job %s, submitter 0 got %s: invariant I1 broken", i, results[i].Job.JobID, results[0].Job.JobID)
		}
	}
	if created != 1 {
		t.Fatalf("%d submitters report Created, want exactly 1", created)
	}
	list, err := e.s.Jobs().ListByTemplate(e.ctx, tpl)
	must(t, err, "ListByTemplate")
	if len(list) != 1 || list[0].JobID != results[0].Job.JobID || list[0].Status != core.JobPending {
		t.Fatalf("the template has %d jobs, want the one PENDING job %s", len(list), results[0].Job.JobID)
	}
}

func testSubmitDifferent(t *testing.T, e *env) {
	svc := &control.Service{Store: e.s, IDs: ids}
	tpl := uniq("tpl-i1-")
	first, err := svc.SubmitFromImage(e.ctx, FromImageRequest(tpl, "1.0"))
	must(t, err, "first submit")
	if !first.Created {
		t.Fatal("first submit did not create a job")
	}
	again, err := svc.SubmitFromImage(e.ctx, FromImageRequest(tpl, "1.0"))
	must(t, err, "identical resubmit")
	if again.Created || again.Job.JobID != first.Job.JobID {
		t.Fatalf("identical resubmit: created=%v job %s, want the existing job %s", again.Created, again.Job.JobID, first.Job.JobID)
	}

	_, err = svc.SubmitFromImage(e.ctx, FromImageRequest(tpl, "2.0"))
	var active *core.ActiveJobError
	if !errors.As(err, &active) {
		t.Fatalf("different request while active: got %v, want *core.ActiveJobError", err)
	}
	if active.JobID != first.Job.JobID || active.TemplateID != tpl {
		t.Fatalf("ActiveJobError names job %s of %s, want %s of %s", active.JobID, active.TemplateID, first.Job.JobID, tpl)
	}
	mustErrIs(t, err, core.ErrAttemptInProgress, "different request while active")

	// Once the job fails, the different request starts attempt 2.
	_, applied, err := svc.Report(e.ctx, first.Job.JobID, core.Fail(core.PhasePulling, "manifest unknown"))
	must(t, err, "report failure")
	if !applied {
		t.Fatal("failure report not applied")
	}
	second, err := svc.SubmitFromImage(e.ctx, FromImageRequest(tpl, "2.0"))
	must(t, err, "submit after failure")
	if !second.Created || second.Job.AttemptNo != 2 || second.Job.RetryOfJobID != first.Job.JobID {
		t.Fatalf("submit after failure: created=%v attempt %d retry of %q, want attempt 2 retrying %s",
			second.Created, second.Job.AttemptNo, second.Job.RetryOfJobID, first.Job.JobID)
	}
}
