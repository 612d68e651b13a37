package nodeagenttest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Harness gives the suite a NodeAgent and the node it reaches.
type Harness interface {
	// MakeAgent returns the NodeAgent under test and a node it can reach.
	// The node must be able to fetch from loopback HTTP servers the suite
	// starts.
	MakeAgent(ctx context.Context) (ports.NodeAgent, ports.Node, error)
	// ArtifactFile returns the path where the node keeps the ext4 of an
	// artifact, or "" when the test cannot see the node's disk (then the
	// suite checks behaviour only through the NodeAgent).
	ArtifactFile(instanceType, artifactID string) string
	// Close releases what the harness opened.
	Close()
}

// HarnessConfig is what the suite tells a harness about its fixtures.
type HarnessConfig struct {
	// ArtifactBaseURL is the base URL of the server every artifact the
	// suite publishes is downloaded from (http://127.0.0.1:port).
	ArtifactBaseURL string
}

// HarnessMaker returns a Harness for one subtest.
type HarnessMaker func(ctx context.Context, t *testing.T, cfg HarnessConfig) (Harness, error)

const instanceType = "cubebox"

// testTimeout bounds each subtest so a hung node fails instead of hanging.
const testTimeout = 60 * time.Second

type env struct {
	ctx   context.Context
	h     Harness
	agent ports.NodeAgent
	node  ports.Node
	srv   *artifactServer
	run   string // random prefix for ids, so subtests never collide
}

// RunConformanceTests runs the suite against the NodeAgent newHarness
// builds.
func RunConformanceTests(t *testing.T, newHarness HarnessMaker) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"CreateImageDownloadsAndVerifies", testCreateImageDownloads},
		{"CreateImageIsIdempotent", testCreateImageIdempotent},
		{"CreateImageConcurrentSameArtifact", testCreateImageConcurrent},
		{"CreateImageWrongSHA256", testCreateImageWrongSHA},
		{"CreateImageWrongSize", testCreateImageWrongSize},
		{"CreateImageHTTP404", testCreateImage404},
		{"CreateImageWrongToken", testCreateImageWrongToken},
		{"CreateImageRetryAfterFailure", testCreateImageRetry},
		{"CreateImageWithoutURLChecksPresence", testCreateImagePresence},
		{"DestroyImageRemovesBytes", testDestroyImage},
		{"DestroyImageMissingIsNotAnError", testDestroyImageMissing},
		{"AppSnapshotMissingArtifact", testAppSnapshotMissingArtifact},
		{"AppSnapshotRequiresAnnotations", testAppSnapshotRequiresAnnotations},
		{"AppSnapshotRecordsTemplate", testAppSnapshotOK},
		{"CleanupTemplateIsIdempotent", testCleanupTemplate},
	}
	// One server for every subtest (their ids differ), so a harness may
	// share one node between them.
	srv := newArtifactServer()
	defer srv.Close()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			h, err := newHarness(ctx, t, HarnessConfig{ArtifactBaseURL: srv.URL})
			if err != nil {
				t.Fatalf("new harness: %v", err)
			}
			defer h.Close()
			agent, node, err := h.MakeAgent(ctx)
			if err != nil {
				t.Fatalf("MakeAgent: %v", err)
			}
			tc.fn(t, &env{ctx: ctx, h: h, agent: agent, node: node, srv: srv, run: randomHex(6)})
		})
	}
}

// artifactServer serves artifact bytes the way the data plane does: it
// wants the token header, and counts downloads.
type artifactServer struct {
	*httptest.Server
	mu        sync.Mutex
	artifacts map[string]*served
}

type served struct {
	data       []byte
	token      string // required X-Cube-Artifact-Token
	queryToken string // required ?token=, when not empty
	downloads  atomic.Int64
	badToken   atomic.Int64
}

func newArtifactServer() *artifactServer {
	s := &artifactServer{artifacts: map[string]*served{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

func (s *artifactServer) serve(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, "/artifacts/")
	s.mu.Lock()
	a := s.artifacts[id]
	s.mu.Unlock()
	if a == nil {
		http.NotFound(w, r)
		return
	}
	if r.Header.Get(core.DownloadTokenHeader) != a.token || (a.queryToken != "" && r.URL.Query().Get("token") != a.queryToken) {
		a.badToken.Add(1)
		http.Error(w, "bad token", http.StatusUnauthorized)
		return
	}
	a.downloads.Add(1)
	w.Header().Set("Content-Length", strconv.Itoa(len(a.data)))
	w.Write(a.data)
}

// add registers an artifact and returns it with its URL.
func (s *artifactServer) add(id string, data []byte, token, queryToken string) (*served, string) {
	a := &served{data: data, token: token, queryToken: queryToken}
	s.mu.Lock()
	s.artifacts[id] = a
	s.mu.Unlock()
	u := s.URL + "/artifacts/" + id
	if queryToken != "" {
		u += "?token=" + queryToken
	}
	return a, u
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return b
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// fixture is one artifact published on the suite's server.
type fixture struct {
	id    string
	data  []byte
	token string
	url   string
	srv   *served
}

func (e *env) publish(t *testing.T, size int) *fixture {
	t.Helper()
	return e.publishWithQuery(t, size, "")
}

// publishWithQuery publishes an artifact whose URL also carries
// ?token=queryToken, which the server then requires too.
func (e *env) publishWithQuery(t *testing.T, size int, queryToken string) *fixture {
	t.Helper()
	f := &fixture{id: "rfs-" + e.run + "-" + randomHex(4), data: randomBytes(size), token: "tok-" + randomHex(8)}
	f.srv, f.url = e.srv.add(f.id, f.data, f.token, queryToken)
	return f
}

// spec is what the control plane tells a node about f.
func (f *fixture) spec() core.NodeArtifact {
	return core.NodeArtifact{
		ArtifactID:   f.id,
		DownloadURL:  f.url,
		Token:        f.token,
		SHA256:       sha(f.data),
		SizeBytes:    int64(len(f.data)),
		InstanceType: instanceType,
	}
}

// checkFile asserts the node holds exactly want for artifact id (when the
// harness can see the node's disk).
func (e *env) checkFile(t *testing.T, id string, want []byte) {
	t.Helper()
	p := e.h.ArtifactFile(instanceType, id)
	if p == "" {
		return
	}
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("artifact file: %v", err)
	}
	if sha(got) != sha(want) {
		t.Fatalf("artifact file %s holds %d bytes with sha256 %s, want %d bytes %s", p, len(got), sha(got), len(want), sha(want))
	}
}

// checkNoFile asserts the node holds no final or partial file for id.
func (e *env) checkNoFile(t *testing.T, id string) {
	t.Helper()
	p := e.h.ArtifactFile(instanceType, id)
	if p == "" {
		return
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("artifact file %s exists (err=%v), want none", p, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(p))
	for _, en := range entries {
		t.Errorf("leftover file %s in the artifact directory", en.Name())
	}
}

func testCreateImageDownloads(t *testing.T, e *env) {
	f := e.publishWithQuery(t, 300<<10, "q-"+randomHex(4))
	spec := f.spec()
	// Digests are compared without regard to case.
	spec.SHA256 = strings.ToUpper(sha(f.data))
	if err := e.agent.CreateImage(e.ctx, e.node, spec); err != nil {
		t.Fatalf("CreateImage: %v", err)
	}
	if n := f.srv.downloads.Load(); n != 1 {
		t.Fatalf("%d downloads, want 1 (bad-token attempts: %d)", n, f.srv.badToken.Load())
	}
	e.checkFile(t, f.id, f.data)
	// The template run path must find it too.
	tid := "tpl-" + e.run
	if _, err := e.agent.AppSnapshot(e.ctx, e.node, SandboxRequest(tid, f.id, instanceType), ""); err != nil {
		t.Fatalf("AppSnapshot after CreateImage: %v", err)
	}
	if err := e.agent.CleanupTemplate(e.ctx, e.node, tid, ""); err != nil {
		t.Fatalf("CleanupTemplate: %v", err)
	}
}

func testCreateImageIdempotent(t *testing.T, e *env) {
	f := e.publish(t, 64<<10)
	for i := range 3 {
		if err := e.agent.CreateImage(e.ctx, e.node, f.spec()); err != nil {
			t.Fatalf("CreateImage #%d: %v", i+1, err)
		}
	}
	if n := f.srv.downloads.Load(); n != 1 {
		t.Fatalf("%d downloads for 3 CreateImage calls, want 1: a present artifact is not fetched again", n)
	}
	e.checkFile(t, f.id, f.data)
}

func testCreateImageConcurrent(t *testing.T, e *env) {
	f := e.publish(t, 1<<20)
	const callers = 4
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() { errs[i] = e.agent.CreateImage(e.ctx, e.node, f.spec()) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("caller %d: %v", i, err)
		}
	}
	e.checkFile(t, f.id, f.data)
	t.Logf("%d callers, %d downloads", callers, f.srv.downloads.Load())
}

func testCreateImageWrongSHA(t *testing.T, e *env) {
	f := e.publish(t, 32<<10)
	spec := f.spec()
	spec.SHA256 = sha([]byte("something else"))
	if err := e.agent.CreateImage(e.ctx, e.node, spec); err == nil {
		t.Fatal("CreateImage with a wrong sha256 succeeded")
	}
	e.checkNoFile(t, f.id)
	if _, err := e.agent.AppSnapshot(e.ctx, e.node, SandboxRequest("tpl-"+e.run, f.id, instanceType), ""); err == nil {
		t.Fatal("AppSnapshot found an artifact whose download failed verification")
	}
}

func testCreateImageWrongSize(t *testing.T, e *env) {
	f := e.publish(t, 32<<10)
	for _, size := range []int{len(f.data) - 1, len(f.data) + 1} {
		spec := f.spec()
		spec.SizeBytes = int64(size)
		if err := e.agent.CreateImage(e.ctx, e.node, spec); err == nil {
			t.Fatalf("CreateImage with size_bytes %d for %d bytes succeeded", size, len(f.data))
		}
		e.checkNoFile(t, f.id)
	}
}

func testCreateImage404(t *testing.T, e *env) {
	f := e.publish(t, 1024)
	spec := f.spec()
	spec.DownloadURL = e.srv.URL + "/artifacts/missing-" + e.run
	err := e.agent.CreateImage(e.ctx, e.node, spec)
	if err == nil {
		t.Fatal("CreateImage of a 404 URL succeeded")
	}
	if !strings.Contains(err.Error(), "404") {
		t.Errorf("error %q does not give the HTTP status 404", err)
	}
	e.checkNoFile(t, f.id)
}

func testCreateImageWrongToken(t *testing.T, e *env) {
	f := e.publish(t, 1024)
	spec := f.spec()
	spec.Token = "wrong-" + randomHex(4)
	err := e.agent.CreateImage(e.ctx, e.node, spec)
	if err == nil {
		t.Fatal("CreateImage with a wrong token succeeded")
	}
	if f.srv.badToken.Load() == 0 {
		t.Fatal("the artifact server saw no request with the wrong token")
	}
	if strings.Contains(err.Error(), spec.Token) {
		t.Errorf("the error %q quotes the token", err)
	}
	e.checkNoFile(t, f.id)
}

func testCreateImageRetry(t *testing.T, e *env) {
	f := e.publish(t, 16<<10)
	bad := f.spec()
	bad.SHA256 = sha(nil)
	if err := e.agent.CreateImage(e.ctx, e.node, bad); err == nil {
		t.Fatal("CreateImage with a wrong sha256 succeeded")
	}
	if err := e.agent.CreateImage(e.ctx, e.node, f.spec()); err != nil {
		t.Fatalf("CreateImage after a failed attempt: %v", err)
	}
	e.checkFile(t, f.id, f.data)
}

// testCreateImagePresence: without a URL, CreateImage answers from the
// node's own copy and never downloads; a node without the artifact says
// not found.
func testCreateImagePresence(t *testing.T, e *env) {
	f := e.publish(t, 8<<10)
	check := f.spec()
	check.DownloadURL, check.Token = "", ""
	if err := e.agent.CreateImage(e.ctx, e.node, check); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("presence check before distribution: %v, want core.ErrNotFound", err)
	}
	if err := e.agent.CreateImage(e.ctx, e.node, f.spec()); err != nil {
		t.Fatalf("CreateImage: %v", err)
	}
	if err := e.agent.CreateImage(e.ctx, e.node, check); err != nil {
		t.Fatalf("presence check of a held artifact: %v", err)
	}
	if err := e.agent.DestroyImage(e.ctx, e.node, f.id); err != nil {
		t.Fatalf("DestroyImage: %v", err)
	}
	if err := e.agent.CreateImage(e.ctx, e.node, check); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("presence check after DestroyImage: %v, want core.ErrNotFound", err)
	}
	if n := f.srv.downloads.Load(); n != 1 {
		t.Fatalf("%d downloads, want 1: a presence check downloaded", n)
	}
	e.checkNoFile(t, f.id)
}

func testDestroyImage(t *testing.T, e *env) {
	f := e.publish(t, 16<<10)
	if err := e.agent.CreateImage(e.ctx, e.node, f.spec()); err != nil {
		t.Fatalf("CreateImage: %v", err)
	}
	if err := e.agent.DestroyImage(e.ctx, e.node, f.id); err != nil {
		t.Fatalf("DestroyImage: %v", err)
	}
	e.checkNoFile(t, f.id)
	if _, err := e.agent.AppSnapshot(e.ctx, e.node, SandboxRequest("tpl-"+e.run, f.id, instanceType), ""); err == nil {
		t.Fatal("AppSnapshot found an artifact after DestroyImage")
	}
	if err := e.agent.DestroyImage(e.ctx, e.node, f.id); err != nil {
		t.Fatalf("second DestroyImage: %v", err)
	}
	// Distributing again after a destroy fetches it anew.
	if err := e.agent.CreateImage(e.ctx, e.node, f.spec()); err != nil {
		t.Fatalf("CreateImage after DestroyImage: %v", err)
	}
	if n := f.srv.downloads.Load(); n != 2 {
		t.Fatalf("%d downloads, want 2", n)
	}
	e.checkFile(t, f.id, f.data)
}

func testDestroyImageMissing(t *testing.T, e *env) {
	if err := e.agent.DestroyImage(e.ctx, e.node, "rfs-never-"+e.run); err != nil {
		t.Fatalf("DestroyImage of an artifact the node never had: %v", err)
	}
}

func testAppSnapshotMissingArtifact(t *testing.T, e *env) {
	_, err := e.agent.AppSnapshot(e.ctx, e.node, SandboxRequest("tpl-"+e.run, "rfs-absent-"+e.run, instanceType), "")
	if err == nil {
		t.Fatal("AppSnapshot without the rootfs artifact on the node succeeded")
	}
}

func testAppSnapshotRequiresAnnotations(t *testing.T, e *env) {
	f := e.publish(t, 4096)
	if err := e.agent.CreateImage(e.ctx, e.node, f.spec()); err != nil {
		t.Fatalf("CreateImage: %v", err)
	}
	tid := "tpl-" + e.run
	tests := []struct {
		name string
		edit func(ann map[string]any)
	}{
		{"no create flag", func(ann map[string]any) { delete(ann, "cube.master.appsnapshot.create") }},
		{"create flag false", func(ann map[string]any) { ann["cube.master.appsnapshot.create"] = "false" }},
		{"no template id", func(ann map[string]any) { delete(ann, "cube.master.appsnapshot.template.id") }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var req map[string]any
			if err := json.Unmarshal(CreateRequestJSON(tid, f.id, instanceType), &req); err != nil {
				t.Fatal(err)
			}
			tc.edit(req["annotations"].(map[string]any))
			b, _ := json.Marshal(req)
			sreq, _, err := core.ParseSandboxRequest(b)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.agent.AppSnapshot(e.ctx, e.node, sreq, ""); err == nil {
				t.Fatal("AppSnapshot succeeded")
			}
		})
	}
}

func testAppSnapshotOK(t *testing.T, e *env) {
	f := e.publish(t, 8192)
	if err := e.agent.CreateImage(e.ctx, e.node, f.spec()); err != nil {
		t.Fatalf("CreateImage: %v", err)
	}
	tid := "tpl-" + e.run
	res, err := e.agent.AppSnapshot(e.ctx, e.node, SandboxRequest(tid, f.id, instanceType), "")
	if err != nil {
		t.Fatalf("AppSnapshot: %v", err)
	}
	if res.TemplateID != tid || res.SnapshotPath == "" || res.SandboxID == "" {
		t.Fatalf("AppSnapshot = %+v, want template id %s and a snapshot path and sandbox id", res, tid)
	}
	if e.h.ArtifactFile(instanceType, f.id) != "" {
		if _, err := os.Stat(res.SnapshotPath); err != nil {
			t.Fatalf("snapshot path: %v", err)
		}
	}
	// A redo snapshots the same template again.
	again, err := e.agent.AppSnapshot(e.ctx, e.node, SandboxRequest(tid, f.id, instanceType), "")
	if err != nil {
		t.Fatalf("second AppSnapshot: %v", err)
	}
	if again.TemplateID != tid {
		t.Fatalf("second AppSnapshot = %+v", again)
	}
	if err := e.agent.CleanupTemplate(e.ctx, e.node, tid, res.SnapshotPath); err != nil {
		t.Fatalf("CleanupTemplate: %v", err)
	}
}

func testCleanupTemplate(t *testing.T, e *env) {
	f := e.publish(t, 8192)
	if err := e.agent.CreateImage(e.ctx, e.node, f.spec()); err != nil {
		t.Fatalf("CreateImage: %v", err)
	}
	tid := "tpl-" + e.run
	res, err := e.agent.AppSnapshot(e.ctx, e.node, SandboxRequest(tid, f.id, instanceType), "")
	if err != nil {
		t.Fatalf("AppSnapshot: %v", err)
	}
	for i := range 2 {
		if err := e.agent.CleanupTemplate(e.ctx, e.node, tid, res.SnapshotPath); err != nil {
			t.Fatalf("CleanupTemplate #%d: %v", i+1, err)
		}
	}
	if e.h.ArtifactFile(instanceType, f.id) != "" {
		if _, err := os.Stat(res.SnapshotPath); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("snapshot path after cleanup: err=%v, want not exist", err)
		}
		// Cleaning up the template leaves the artifact alone.
		e.checkFile(t, f.id, f.data)
	}
	if err := e.agent.CleanupTemplate(e.ctx, e.node, "tpl-never-"+e.run, ""); err != nil {
		t.Fatalf("CleanupTemplate of a template the node never had: %v", err)
	}
}
