package cubeapi

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/cubelet"
	"github.com/cubesandbox/templatecenter/adapters/lock/memlock"
	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/adapters/store/memstore"
	"github.com/cubesandbox/templatecenter/adapters/system"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/portsmock"
)

// realEnv is the router wired to a real control.Service over the memory
// store (which passes the same store suite as the SQL store), with the
// outside world (nodes, the data plane) as recording fakes. Validation,
// the job rules and the store writes are the production code paths.
type realEnv struct {
	t     testing.TB
	store ports.Store
	svc   *control.Service
	h     http.Handler
	agent *portsmock.NodeAgentMock
	dp    *portsmock.DataPlaneMock

	// seeded: a READY template with an alias and its artifact, built
	// through the service; every abuse case must leave it as it is.
	seedTID, seedAlias, seedJob, seedArtifact string
	pendingJob                                string
}

const (
	seedDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	twoDigest  = "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
	seedSHA    = "5f5e5d5c5b5a595857565554535251504f4e4d4c4b4a49484746454443424140"
)

// newRealEnv wires the router over the memory store; newSQLEnv over
// SQLite through entstore (its column widths and validators are the SQL
// schema's).
func newRealEnv(t testing.TB) *realEnv { return newEnvWith(t, memstore.New()) }

func newSQLEnv(t testing.TB) *realEnv {
	t.Helper()
	ctx := context.Background()
	st, err := entstore.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "abuse.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return newEnvWith(t, st)
}

func newEnvWith(t testing.TB, st ports.Store) *realEnv {
	t.Helper()
	e := &realEnv{t: t, store: st}
	n1 := ports.Node{ID: "node-1", IP: "10.0.0.1", InstanceType: core.DefaultInstanceType, Addr: "node-1:9999", Healthy: true}
	dir := &portsmock.NodeDirectoryMock{
		HealthyNodesFunc: func(_ context.Context, it string) ([]ports.Node, error) {
			if it == n1.InstanceType {
				return []ports.Node{n1}, nil
			}
			return nil, nil
		},
		NodesFunc: func(_ context.Context, it string) ([]ports.Node, error) {
			if it == n1.InstanceType {
				return []ports.Node{n1}, nil
			}
			return nil, nil
		},
		DownFunc: func(string) <-chan struct{} { return nil },
		GetFunc: func(_ context.Context, id string) (ports.Node, error) {
			if id == n1.ID || id == n1.IP {
				return n1, nil
			}
			return ports.Node{}, fmt.Errorf("node %s: %w", id, core.ErrNotFound)
		},
	}
	var mu sync.Mutex
	e.agent = &portsmock.NodeAgentMock{
		CreateImageFunc:  func(context.Context, ports.Node, core.NodeArtifact) error { return nil },
		DestroyImageFunc: func(context.Context, ports.Node, string) error { return nil },
		AppSnapshotFunc: func(_ context.Context, n ports.Node, req *core.SandboxRequest, _ string) (ports.SnapshotResult, error) {
			tid := req.Annotations[core.AnnotationTemplateID]
			return ports.SnapshotResult{TemplateID: tid, SnapshotPath: "/snap/" + tid + "/" + n.ID, GuestImageVersion: "g", KernelVersion: "6.6"}, nil
		},
		CleanupTemplateFunc: func(context.Context, ports.Node, string, string) error { return nil },
	}
	e.dp = &portsmock.DataPlaneMock{
		ArtifactExistsFunc: func(context.Context, *core.Artifact) (bool, error) { return true, nil },
		SubmitBuildFunc:    func(context.Context, ports.BuildRequest) error { mu.Lock(); defer mu.Unlock(); return nil },
		DeleteArtifactFunc: func(_ context.Context, aid string) error {
			return e.store.Artifacts().Delete(context.Background(), aid)
		},
		UploadArtifactFunc: func(context.Context, string, io.Reader, ports.ObjectInfo) (ports.StoredObject, error) {
			return ports.StoredObject{}, fmt.Errorf("no uploads here: %w", core.ErrUnsupported)
		},
	}
	e.svc = &control.Service{Store: e.store, Locker: memlock.New(), Nodes: dir, Agent: e.agent, DataPlane: e.dp,
		IDs: system.IDs{}, Config: control.Config{DistributionWorkers: 1}}
	h, err := New(Config{Token: testToken, Reports: e.svc, Jobs: e.svc, Migrations: e.svc, Catalog: e.svc, Artifacts: e.svc,
		Logger: slog.New(slog.DiscardHandler), DownloadBaseURL: "http://master:8089",
		RenderCubelet: func(req *core.SandboxRequest) (any, error) { return cubelet.RequestOptions{}.RunRequest(req) }})
	if err != nil {
		t.Fatal(err)
	}
	e.h = h
	e.seed()
	return e
}

// seed builds the READY templates tpl-seed (alias "seed") and tpl-two
// (alias "two") the way the callback does (create, RUNNING, BUILT,
// resume), and leaves tpl-pending with a PENDING create job.
func (e *realEnv) seed() {
	e.t.Helper()
	e.seedTID, e.seedAlias = "tpl-seed", "seed"
	e.seedJob, e.seedArtifact = e.readyTemplate(e.seedTID, e.seedAlias, seedDigest, "seed-download-token")
	e.readyTemplate("tpl-two", "two", twoDigest, "two-download-token")
	job, err := e.svc.CreateFromImage(context.Background(), &core.FromImageRequest{RequestID: "r-pending", SourceImageRef: "registry.example/pending:1",
		TemplateID: "tpl-pending", WritableLayerSize: "10Gi"}, "http://master:8089")
	if err != nil || job.Status != core.JobPending {
		e.t.Fatalf("pending job: %+v %v", job, err)
	}
	e.pendingJob = job.JobID
}

// readyTemplate builds tid from an image that resolved to digest; it
// returns the job and the artifact id.
func (e *realEnv) readyTemplate(tid, alias, digest, token string) (jobID, artifactID string) {
	e.t.Helper()
	ctx := context.Background()
	req := &core.FromImageRequest{RequestID: "r-" + tid, SourceImageRef: "registry.example/app:1",
		TemplateID: tid, Alias: alias, WritableLayerSize: "20Gi", RegistryPassword: "hunter2"}
	job, err := e.svc.CreateFromImage(ctx, req, "http://master:8089")
	if err != nil {
		e.t.Fatalf("seed create %s: %v", tid, err)
	}
	// The fingerprint the data plane computes, which the master checks.
	inputs := &core.BuildInputs{SourceImageDigest: digest, BuilderFormat: core.BuilderFormatVersion, Builder: "seed/1"}
	n, err := core.NormalizeFromImageRequest(req, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	fp, err := core.FingerprintOf(n, *inputs)
	if err != nil {
		e.t.Fatal(err)
	}
	aid := "rfs-" + fp[:24]
	running := core.Progress(core.JobRunning, core.PhaseUnpacking, 20)
	running.ArtifactID, running.Fingerprint, running.SourceImageDigest = aid, fp, digest
	if _, err := e.svc.HandleStatusReport(ctx, job.JobID, ports.StatusReport{Update: running}); err != nil {
		e.t.Fatalf("seed RUNNING: %v", err)
	}
	built := core.Progress(core.JobBuilt, core.PhaseReady, 100)
	built.ArtifactID, built.ArtifactStatus, built.Fingerprint = aid, "READY", fp
	art := &core.Artifact{ArtifactID: aid, Fingerprint: fp, SourceImageDigest: digest, DownloadBaseURL: "http://master:8089",
		Ext4SHA256: seedSHA, Ext4SizeBytes: 64 << 20, ImageConfigJSON: `{"Cmd":["sh"]}`, StorageBackend: "file",
		ObjectKey: aid + "/" + aid + ".ext4", Status: core.ArtifactReady, DownloadToken: token}
	if _, err := e.svc.HandleStatusReport(ctx, job.JobID, ports.StatusReport{Update: built, Artifact: art, Inputs: inputs}); err != nil {
		e.t.Fatalf("seed BUILT: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := e.svc.Wait(wctx); err != nil {
		e.t.Fatal(err)
	}
	d, err := e.store.Templates().GetDefinition(ctx, tid)
	if err != nil || d.Status != core.TemplateReady {
		e.t.Fatalf("seed template %s: %+v %v", tid, d, err)
	}
	return job.JobID, aid
}

// snapshot is every row the store holds, rendered as text, so two
// snapshots compare equal exactly when nothing was written.
func (e *realEnv) snapshot() string {
	e.t.Helper()
	ctx := context.Background()
	var b strings.Builder
	defs, err := e.store.Templates().ListDefinitions(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, d := range defs {
		fmt.Fprintf(&b, "def %+v\n", *d)
		reps, err := e.store.Templates().ListReplicas(ctx, d.TemplateID)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, r := range reps {
			fmt.Fprintf(&b, "  replica %+v\n", *r)
		}
	}
	jobs, err := e.store.Jobs().ListStale(ctx, ports.StaleQuery{Statuses: allJobStatuses, UpdatedBefore: time.Now().Add(24 * time.Hour), Limit: 1 << 20})
	if err != nil {
		e.t.Fatal(err)
	}
	slices.SortFunc(jobs, func(a, b *core.Job) int { return strings.Compare(a.JobID, b.JobID) })
	for _, j := range jobs {
		fmt.Fprintf(&b, "job %+v\n", *j)
	}
	for _, st := range allArtifactStatuses {
		arts, err := e.store.Artifacts().ListByStatus(ctx, st, time.Now().Add(24*time.Hour), 1<<20)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, a := range arts {
			fmt.Fprintf(&b, "artifact %+v\n", *a)
			ps, err := e.store.Placements().List(ctx, a.ArtifactID)
			if err != nil {
				e.t.Fatal(err)
			}
			fmt.Fprintf(&b, "  placements %v\n", ps)
		}
	}
	for _, name := range []string{e.seedTID, e.seedAlias, "tpl-two", "two", "tpl-pending"} {
		tid, kind, err := e.store.Names().Holder(ctx, name)
		fmt.Fprintf(&b, "name %s -> %s %v %v\n", name, tid, kind, err)
	}
	return b.String()
}

var (
	allJobStatuses      = []core.JobStatus{core.JobPending, core.JobRunning, core.JobBuilt, core.JobReady, core.JobFailed}
	allArtifactStatuses = []core.ArtifactStatus{core.ArtifactPending, core.ArtifactDeleting, core.ArtifactBuilding, core.ArtifactReady, core.ArtifactFailed, core.ArtifactCleanupPending}
)

// outside counts the calls that leave the master (a build forwarded, an
// artifact deleted, node RPCs).
func (e *realEnv) outside() string {
	return fmt.Sprintf("submit=%d delete=%d upload=%d createImage=%d snapshot=%d destroy=%d cleanup=%d",
		len(e.dp.SubmitBuildCalls()), len(e.dp.DeleteArtifactCalls()), len(e.dp.UploadArtifactCalls()),
		len(e.agent.CreateImageCalls()), len(e.agent.AppSnapshotCalls()), len(e.agent.DestroyImageCalls()), len(e.agent.CleanupTemplateCalls()))
}
