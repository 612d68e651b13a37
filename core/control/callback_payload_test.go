package control_test

import (
	"github.com/cubesandbox/templatecenter/testkit/testenv"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// fingerprintFor is the fingerprint of req built from digest by
// testBuilder (and registers it for inputsOf).
func fingerprintFor(req *core.FromImageRequest, digest string) string {
	c := *req
	n, err := core.NormalizeFromImageRequest(&c, nil)
	if err != nil {
		panic(err)
	}
	fp, err := core.FingerprintOf(n, core.BuildInputs{SourceImageDigest: digest, BuilderFormat: core.BuilderFormatVersion, Builder: testBuilder})
	if err != nil {
		panic(err)
	}
	digestMu.Lock()
	digestOf[fp] = digest
	digestMu.Unlock()
	return fp
}

var digestMu sync.Mutex

// TestBuiltReportIsHeldToTheJobsOwnArtifact: the callback token is all a
// report shows, so a BUILT report may bind only the artifact of the job's
// own spec, with paths of this service's shape, and never describe a READY
// artifact otherwise than its row records. Each forged report is refused
// (the job is left as it was, the rows untouched) and the attempts on
// another artifact are logged as security events. Before, one job's BUILT
// report could name another template's READY artifact and rewrite that
// row's sha256, object_key (../../../../etc/passwd) and ext4_path, and that
// template's downloads then failed.
func TestBuiltReportIsHeldToTheJobsOwnArtifact(t *testing.T) {
	other := request("tpl-other")
	other.WritableLayerSize = "40Gi" // another spec
	fpOther := fingerprintFor(other, digestB)
	forged := func(fp string, edit func(a *core.Artifact, in *core.BuildInputs)) ports.StatusReport {
		u := core.Progress(core.JobBuilt, core.PhaseReady, 100)
		u.ArtifactID, u.ArtifactStatus, u.Fingerprint = aidOf(fp), "READY", fp
		a, in := artifactMeta(fp), inputsOf(fp)
		a.Ext4SHA256, a.Ext4SizeBytes = strings.Repeat("e", 64), 1<<20
		if edit != nil {
			edit(a, in)
		}
		return ports.StatusReport{Update: u, Artifact: a, Inputs: in}
	}
	for _, tc := range []struct {
		name     string
		report   ports.StatusReport
		security bool // logged as a security event
	}{
		{"another template's artifact", forged(fpOther, nil), true},
		{"another template's artifact, the job's inputs", forged(fpOther, func(_ *core.Artifact, in *core.BuildInputs) { *in = *inputsOf(fpA) }), true},
		{"own artifact, READY with another sha256", forged(fpA, nil), true},
		{"own artifact, object key outside", forged(fpA, func(a *core.Artifact, _ *core.BuildInputs) {
			a.Ext4SHA256, a.Ext4SizeBytes, a.ObjectKey = shaExt4, 64<<20, "../../../../etc/passwd"
		}), false},
		{"own artifact, ext4 path outside", forged(fpA, func(a *core.Artifact, _ *core.BuildInputs) {
			a.Ext4SHA256, a.Ext4SizeBytes, a.Ext4Path = shaExt4, 64<<20, "/data/../etc/passwd"
		}), false},
		{"own artifact, no inputs", func() ports.StatusReport {
			r := forged(fpA, func(a *core.Artifact, _ *core.BuildInputs) { a.Ext4SHA256, a.Ext4SizeBytes = shaExt4, 64<<20 })
			r.Inputs = nil
			return r
		}(), false},
		{"own artifact, another digest than the job resolved", forged(fpB, func(a *core.Artifact, _ *core.BuildInputs) { a.Ext4SHA256, a.Ext4SizeBytes = shaExt4, 64<<20 }), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "node-1")
			var logs testenv.Buffer
			e.svc.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			otherJob := e.create(other)
			e.build(otherJob.JobID, fpOther)
			e.ready("tpl-same", fpA) // the job's own artifact, READY
			rows := map[string]core.Artifact{aidOf(fpOther): *e.artifact(aidOf(fpOther)), aidOf(fpA): *e.artifact(aidOf(fpA))}

			job := e.create(request("tpl-j"))
			e.running(job.JobID, fpA)
			ok, err := e.svc.HandleStatusReport(e.ctx, job.JobID, tc.report)
			if ok || err == nil {
				t.Errorf("forged report: applied=%v err=%v; want it refused", ok, err)
			}
			e.wait()
			eq(t, "job", e.job(job.JobID).Status, core.JobRunning)
			for aid, before := range rows {
				after := e.artifact(aid)
				if after.Ext4SHA256 != before.Ext4SHA256 || after.Ext4SizeBytes != before.Ext4SizeBytes ||
					after.ObjectKey != before.ObjectKey || after.Ext4Path != before.Ext4Path || after.Status != before.Status {
					t.Errorf("artifact %s rewritten: %+v -> %+v", aid, before, *after)
				}
			}
			if got := strings.Contains(logs.String(), "security_event=true"); got != tc.security {
				t.Errorf("security event logged = %v, want %v; log:\n%s", got, tc.security, logs.String())
			}
		})
	}
}

// TestBindNeverRevivesARowTheScrubFailed: the data plane reported BUILT
// for a READY artifact whose bytes the scrub then found rotten: it failed
// the row and removed the bytes before the master's resume bound the
// report. Binding must not make the row READY again (nodes would be sent
// to download bytes that are gone); the job fails and a redo rebuilds.
// Before, the bind moved FAILED back to READY.
func TestBindNeverRevivesARowTheScrubFailed(t *testing.T) {
	e := newEnv(t, "node-1")
	e.ready("tpl-first", fpA)
	job := e.create(request("tpl-second"))
	l, err := e.locker.Lock(e.ctx, "tc_resume_"+aidOf(fpA))
	if err != nil {
		t.Fatal(err)
	}
	e.build(job.JobID, fpA)
	if _, err := e.store.Artifacts().Update(e.ctx, aidOf(fpA), func(a *core.Artifact) error {
		a.LastError = "stored bytes rotted"
		return a.MoveTo(core.ArtifactFailed)
	}); err != nil {
		t.Fatal(err)
	}
	_ = l.Unlock(e.ctx)
	e.wait()
	eq(t, "artifact", e.artifactStatus(aidOf(fpA)), core.ArtifactFailed)
	j := e.job(job.JobID)
	eq(t, "job", j.Status, core.JobFailed)
	if !strings.Contains(j.ErrorMessage, "not READY") {
		t.Errorf("job message %q", j.ErrorMessage)
	}
}

func digestFor(fp string) string {
	digestMu.Lock()
	defer digestMu.Unlock()
	return digestOf[fp]
}
