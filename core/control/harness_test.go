package control_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/lock/memlock"
	"github.com/cubesandbox/templatecenter/adapters/store/memstore"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/portsmock"
)

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// fingerprints of test artifacts: a build of request(...) from digestA or
// digestB by testBuilder, as the data plane computes them (the template id
// is not part of a fingerprint); the artifact id is rfs-<first 24 hex>.
var (
	fpA = testFingerprint(digestA)
	fpB = testFingerprint(digestB)
)

func aidOf(fp string) string { return "rfs-" + fp[:24] }

const (
	digestA     = "sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	digestB     = "sha256:" + "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
	shaExt4     = "5f5e5d5c5b5a59585756555453525150" + "4f4e4d4c4b4a49484746454443424140"
	baseURL     = "http://master:8089"
	testBuilder = "test-builder/1"
)

// digestOf maps a test fingerprint to the digest it was built from.
var digestOf = map[string]string{}

// inputsOf is what a BUILT report of fp says it was built from.
func inputsOf(fp string) *core.BuildInputs {
	return &core.BuildInputs{SourceImageDigest: digestFor(fp), BuilderFormat: core.BuilderFormatVersion, Builder: testBuilder}
}

func testFingerprint(digest string) string { return fingerprintFor(request("any"), digest) }

// env is one service wired to fakes: an in-memory store, an in-process
// locker, and moq mocks for nodes, the node agent and the data plane whose
// behaviour the test steers through the maps below.
type env struct {
	t      *testing.T
	ctx    context.Context
	clock  *fakeClock
	store  ports.Store
	ids    *fakeIDs
	locker ports.Locker
	dir    *portsmock.NodeDirectoryMock
	agent  *portsmock.NodeAgentMock
	disp   *portsmock.DataPlaneMock
	svc    *control.Service

	mu          sync.Mutex
	healthy     []ports.Node               // what HealthyNodes returns
	known       map[string]ports.Node      // what Get and Nodes find (healthy or not)
	down        map[string]chan struct{}   // what Down returns for a healthy node
	createFail  map[string]error           // node id -> CreateImage error
	snapFail    map[string]error           // node id -> AppSnapshot error
	destroyFail map[string]error           // node id -> DestroyImage error
	cleanupFail map[string]error           // node id -> CleanupTemplate error
	submitErr   error                      // SubmitBuild error
	onNode      map[string]map[string]bool // node -> artifact ids it holds
}

func node(id string) ports.Node {
	return ports.Node{ID: id, IP: "10.0.0." + strings.TrimPrefix(id, "node-"), InstanceType: "cubebox", Addr: id + ":9999", Healthy: true}
}

func newEnv(t *testing.T, nodeIDs ...string) *env {
	t.Helper()
	clock := &fakeClock{t: t0}
	return newEnvOn(t, clock, memstore.New(memstore.WithClock(clock)), memlock.New(), nodeIDs...)
}

// newEnvOn is newEnv on the given store and locker (a database's).
func newEnvOn(t *testing.T, clock *fakeClock, store ports.Store, locker ports.Locker, nodeIDs ...string) *env {
	t.Helper()
	e := &env{
		t: t, ctx: context.Background(), clock: clock, store: store, ids: &fakeIDs{}, locker: locker,
		known: map[string]ports.Node{}, down: map[string]chan struct{}{}, createFail: map[string]error{}, snapFail: map[string]error{},
		destroyFail: map[string]error{}, cleanupFail: map[string]error{}, onNode: map[string]map[string]bool{},
	}
	for _, id := range nodeIDs {
		n := node(id)
		e.healthy = append(e.healthy, n)
		e.known[id] = n
	}
	e.dir = &portsmock.NodeDirectoryMock{
		HealthyNodesFunc: func(_ context.Context, it string) ([]ports.Node, error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			var out []ports.Node
			for _, n := range e.healthy {
				if n.InstanceType == it {
					out = append(out, n)
				}
			}
			return out, nil
		},
		NodesFunc: func(_ context.Context, it string) ([]ports.Node, error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			var out []ports.Node
			for _, n := range e.known {
				if n.InstanceType == it {
					n.Healthy = slices.ContainsFunc(e.healthy, func(h ports.Node) bool { return h.ID == n.ID })
					out = append(out, n)
				}
			}
			slices.SortFunc(out, func(a, b ports.Node) int { return strings.Compare(a.ID, b.ID) })
			return out, nil
		},
		DownFunc: func(id string) <-chan struct{} {
			e.mu.Lock()
			defer e.mu.Unlock()
			if !slices.ContainsFunc(e.healthy, func(h ports.Node) bool { return h.ID == id }) {
				c := make(chan struct{})
				close(c)
				return c
			}
			if e.down[id] == nil {
				e.down[id] = make(chan struct{})
			}
			return e.down[id]
		},
		GetFunc: func(_ context.Context, id string) (ports.Node, error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			n, ok := e.known[id]
			if !ok {
				return ports.Node{}, fmt.Errorf("node %s: %w", id, core.ErrNotFound)
			}
			return n, nil
		},
	}
	e.agent = &portsmock.NodeAgentMock{
		CreateImageFunc: func(_ context.Context, n ports.Node, art core.NodeArtifact) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			if err := e.createFail[n.ID]; err != nil {
				return err
			}
			if art.DownloadURL == "" { // a presence check
				if !e.onNode[n.ID][art.ArtifactID] {
					return fmt.Errorf("node %s: artifact %s does not exist: %w", n.ID, art.ArtifactID, core.ErrNotFound)
				}
				return nil
			}
			if e.onNode[n.ID] == nil {
				e.onNode[n.ID] = map[string]bool{}
			}
			e.onNode[n.ID][art.ArtifactID] = true
			return nil
		},
		DestroyImageFunc: func(_ context.Context, n ports.Node, image string) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			if err := e.destroyFail[n.ID]; err != nil {
				return err
			}
			delete(e.onNode[n.ID], image)
			return nil
		},
		AppSnapshotFunc: func(_ context.Context, n ports.Node, req *core.SandboxRequest, _ string) (ports.SnapshotResult, error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			if err := e.snapFail[n.ID]; err != nil {
				return ports.SnapshotResult{}, err
			}
			tid := req.Annotations[core.AnnotationTemplateID]
			return ports.SnapshotResult{TemplateID: tid, SnapshotPath: "/snap/" + tid + "/" + n.ID, GuestImageVersion: "guest-" + n.ID, KernelVersion: "6.6"}, nil
		},
		CleanupTemplateFunc: func(_ context.Context, n ports.Node, _, _ string) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			return e.cleanupFail[n.ID]
		},
	}
	e.disp = &portsmock.DataPlaneMock{
		ArtifactExistsFunc: func(context.Context, *core.Artifact) (bool, error) { return true, nil },
		UploadArtifactFunc: func(context.Context, string, io.Reader, ports.ObjectInfo) (ports.StoredObject, error) {
			return ports.StoredObject{}, fmt.Errorf("this data plane takes no uploads: %w", core.ErrUnsupported)
		},
		SubmitBuildFunc: func(context.Context, ports.BuildRequest) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			return e.submitErr
		},
		DeleteArtifactFunc: func(_ context.Context, aid string) error {
			// Only the data plane deletes the row (and the bytes).
			return e.store.Artifacts().Delete(context.Background(), aid)
		},
	}
	e.svc = &control.Service{
		Store: e.store, Locker: sharedLocks{e.locker}, Nodes: e.dir, Agent: e.agent, DataPlane: e.disp,
		IDs: e.ids, Clock: clock, Config: control.Config{DistributionWorkers: 2, DownloadTokens: testDownloadTokens},
	}
	return e
}

// testDownloadTokens derives download tokens as the apps do, from a
// callback token.
var testDownloadTokens = core.NewDownloadTokens("control-test-callback-token")

// nodeToken is the token nodes are given for artifact aid: derived from
// the seed its row stores.
func (e *env) nodeToken(aid string) string {
	e.t.Helper()
	return testDownloadTokens.For(aid, e.artifact(aid).DownloadToken)
}

func (e *env) set(fn func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	fn()
}

// setHealthy makes exactly ids healthy; the Down channels of the nodes
// that leave close, as a failed probe closes them.
func (e *env) setHealthy(ids ...string) {
	e.set(func() {
		e.healthy = nil
		for _, id := range ids {
			e.healthy = append(e.healthy, e.known[id])
		}
		for id, c := range e.down {
			if !slices.Contains(ids, id) {
				close(c)
				delete(e.down, id)
			}
		}
	})
}

func (e *env) wait() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
	defer cancel()
	if err := e.svc.Wait(ctx); err != nil {
		e.t.Fatalf("background work did not finish: %v", err)
	}
}

func request(tid string) *core.FromImageRequest {
	return &core.FromImageRequest{
		RequestID: "req-" + tid, SourceImageRef: "registry.local/app:1", RegistryPassword: "s3cret",
		TemplateID: tid, WritableLayerSize: "20Gi", ExposedPorts: []int32{9000, 8080},
	}
}

// create submits req and checks that it was forwarded.
func (e *env) create(req *core.FromImageRequest) *core.Job {
	e.t.Helper()
	job, err := e.svc.CreateFromImage(e.ctx, req, "master:8089")
	if err != nil {
		e.t.Fatalf("CreateFromImage(%s): %v", req.TemplateID, err)
	}
	return job
}

func artifactMeta(fp string) *core.Artifact {
	return &core.Artifact{
		ArtifactID: aidOf(fp), Fingerprint: fp, SourceImageDigest: digestFor(fp), DownloadBaseURL: baseURL,
		Ext4Path: "/data/" + aidOf(fp) + "/" + aidOf(fp) + ".ext4", Ext4SHA256: shaExt4, Ext4SizeBytes: 64 << 20,
		ImageConfigJSON: `{"Entrypoint":["/docker-entrypoint.sh"],"Cmd":["nginx","-g","daemon off;"],"Env":["PATH=/usr/bin:/bin","A=1"],"WorkingDir":"/app","User":"nginx"}`,
		StorageBackend:  "file", ObjectKey: aidOf(fp) + "/" + aidOf(fp) + ".ext4", Status: core.ArtifactReady,
	}
}

// build plays the data plane for job: RUNNING, then BUILT with the
// artifact of fp. It does not wait for the resume.
func (e *env) build(jobID, fp string) {
	e.t.Helper()
	running := core.Progress(core.JobRunning, core.PhaseUnpacking, 20)
	running.ArtifactID, running.Fingerprint, running.SourceImageDigest = aidOf(fp), fp, digestFor(fp)
	if ok, err := e.svc.HandleStatusReport(e.ctx, jobID, ports.StatusReport{Update: running}); err != nil || !ok {
		e.t.Fatalf("RUNNING report: applied=%v err=%v", ok, err)
	}
	built := core.Progress(core.JobBuilt, core.PhaseReady, 100)
	built.ArtifactID, built.ArtifactStatus, built.Fingerprint = aidOf(fp), "READY", fp
	built.ResultJSON = `{"artifact_id":"` + aidOf(fp) + `"}`
	if ok, err := e.svc.HandleStatusReport(e.ctx, jobID, ports.StatusReport{Update: built, Artifact: artifactMeta(fp), Inputs: inputsOf(fp)}); err != nil || !ok {
		e.t.Fatalf("BUILT report: applied=%v err=%v", ok, err)
	}
}

// ready creates a template and runs it to its end state.
func (e *env) ready(tid, fp string) *core.Job {
	e.t.Helper()
	job := e.create(request(tid))
	e.build(job.JobID, fp)
	e.wait()
	return e.job(job.JobID)
}

func (e *env) job(id string) *core.Job {
	e.t.Helper()
	j, err := e.store.Jobs().Get(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return j
}

func (e *env) def(tid string) *core.Definition {
	e.t.Helper()
	d, err := e.store.Templates().GetDefinition(e.ctx, tid)
	if err != nil {
		e.t.Fatalf("definition %s: %v", tid, err)
	}
	return d
}

func (e *env) artifact(aid string) *core.Artifact {
	e.t.Helper()
	a, err := e.store.Artifacts().Get(e.ctx, aid)
	if err != nil {
		e.t.Fatalf("artifact %s: %v", aid, err)
	}
	return a
}

func (e *env) replicas(tid string) map[string]*core.Replica {
	e.t.Helper()
	rs, err := e.store.Templates().ListReplicas(e.ctx, tid)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]*core.Replica{}
	for _, r := range rs {
		out[r.NodeID] = r
	}
	return out
}

func (e *env) placementNodes(aid string) []string {
	e.t.Helper()
	ps, err := e.store.Placements().List(e.ctx, aid)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, p := range ps {
		out = append(out, p.NodeID)
	}
	return out
}

func callNodes[T any](calls []T, nodeOf func(T) string) []string {
	var out []string
	for _, c := range calls {
		out = append(out, nodeOf(c))
	}
	slices.Sort(out)
	return out
}

func (e *env) createImageNodes() []string {
	return callNodes(e.agent.CreateImageCalls(), func(c struct {
		Ctx  context.Context
		Node ports.Node
		Art  core.NodeArtifact
	}) string {
		return c.Node.ID
	})
}

// copies counts the CreateImage calls that sent the artifact (the replica
// check's presence checks carry no download URL).
func (e *env) copies() int {
	n := 0
	for _, c := range e.agent.CreateImageCalls() {
		if c.Art.DownloadURL != "" {
			n++
		}
	}
	return n
}

func (e *env) snapshotNodes() []string {
	return callNodes(e.agent.AppSnapshotCalls(), func(c struct {
		Ctx         context.Context
		Node        ports.Node
		Req         *core.SandboxRequest
		SnapshotDir string
	}) string {
		return c.Node.ID
	})
}

func (e *env) destroyNodes() []string {
	return callNodes(e.agent.DestroyImageCalls(), func(c struct {
		Ctx   context.Context
		Node  ports.Node
		Image string
	}) string {
		return c.Node.ID
	})
}

func wantErrIs(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want one wrapping %v", err, target)
	}
}

func eq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func eqSlice(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func statusReport(u core.JobUpdate) ports.StatusReport { return ports.StatusReport{Update: u} }

// sharedLocks is the in-process locker seen as a database's: its locks
// stand for the other processes of the test (a data plane's owner lock).
type sharedLocks struct{ ports.Locker }
