package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/cubelet/cubeletpb"
	"github.com/cubesandbox/templatecenter/core"
)

// These tests call the services directly (no gRPC) for what the
// conformance suite cannot see: the on-disk record, path safety, redirects
// and logs.

type testAgent struct {
	*Agent
	logs *testenv.Buffer
	img  imagesServer
	box  cubeboxServer
}

// testToken is the node credential of the test agents.
const testToken = "node-token-0123456789"

// newTestAgent is an agent that downloads from the masters at origins
// (the test's artifact servers) only.
func newTestAgent(t testing.TB, origins ...string) *testAgent {
	t.Helper()
	if len(origins) == 0 {
		origins = []string{"http://master.invalid"}
	}
	logs := &testenv.Buffer{}
	a, err := New(Config{
		DataDir:      t.TempDir(),
		NodeID:       "node-1",
		Token:        testToken,
		MasterURLs:   origins,
		Logger:       slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Now:          func() time.Time { return time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC) },
		NewSandboxID: func() string { return "sb-fixed" },
	})
	if err != nil {
		t.Fatal(err)
	}
	return &testAgent{Agent: a, logs: logs, img: imagesServer{a: a}, box: cubeboxServer{a: a}}
}

func hexSHA(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func ext4Spec(id, url, token string, data []byte) *cubeletpb.ImageSpec {
	return &cubeletpb.ImageSpec{
		Image:        id,
		StorageMedia: "ext4",
		Annotations: map[string]string{
			core.AnnotationArtifactID:        id,
			core.AnnotationArtifactURL:       url,
			core.AnnotationArtifactToken:     token,
			core.AnnotationArtifactSHA256:    hexSHA(data),
			core.AnnotationArtifactSizeBytes: strconv.Itoa(len(data)),
		},
	}
}

func (ta *testAgent) create(t *testing.T, spec *cubeletpb.ImageSpec) *cubeletpb.Ret {
	t.Helper()
	resp, err := ta.img.CreateImage(context.Background(), &cubeletpb.CreateImageRequest{RequestID: "r1", Spec: spec})
	if err != nil {
		t.Fatalf("CreateImage returned a transport error: %v", err)
	}
	if resp.GetRequestID() != "r1" {
		t.Errorf("requestID %q not echoed", resp.GetRequestID())
	}
	return resp.GetRet()
}

func serveBytes(t *testing.T, data []byte, status int) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		w.Write(data)
	}))
	t.Cleanup(s.Close)
	return s
}

func TestCreateImageRejectsBadSpecs(t *testing.T) {
	ta := newTestAgent(t)
	data := []byte("ext4 bytes")
	good := func() *cubeletpb.ImageSpec { return ext4Spec("rfs-1", "http://127.0.0.1:1/a", "tok", data) }
	tests := []struct {
		name string
		edit func(*cubeletpb.ImageSpec)
		want string
	}{
		{"docker media", func(s *cubeletpb.ImageSpec) { s.StorageMedia = "docker" }, "storage_media"},
		{"traversal in image", func(s *cubeletpb.ImageSpec) {
			s.Image = "../../etc"
			s.Annotations[core.AnnotationArtifactID] = "../../etc"
		}, "artifact id"},
		{"id differs from image", func(s *cubeletpb.ImageSpec) { s.Annotations[core.AnnotationArtifactID] = "rfs-2" }, "does not match"},
		{"reserved instance type", func(s *cubeletpb.ImageSpec) { s.Annotations[core.AnnotationInstanceType] = "templates" }, "reserved"},
		{"slash in instance type", func(s *cubeletpb.ImageSpec) { s.Annotations[core.AnnotationInstanceType] = "a/b" }, "instance type"},
		{"file url", func(s *cubeletpb.ImageSpec) { s.Annotations[core.AnnotationArtifactURL] = "file:///etc/passwd" }, "http(s)"},
		{"no sha", func(s *cubeletpb.ImageSpec) { delete(s.Annotations, core.AnnotationArtifactSHA256) }, "64 hex"},
		{"short sha", func(s *cubeletpb.ImageSpec) { s.Annotations[core.AnnotationArtifactSHA256] = "abc" }, "64 hex"},
		{"bad size", func(s *cubeletpb.ImageSpec) { s.Annotations[core.AnnotationArtifactSizeBytes] = "-4" }, "byte count"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := good()
			tc.edit(s)
			ret := ta.create(t, s)
			if ret.GetRetCode() != cubeletpb.ErrorCode_InvalidParamFormat || !strings.Contains(ret.GetRetMsg(), tc.want) {
				t.Fatalf("ret = %v, want InvalidParamFormat mentioning %q", ret, tc.want)
			}
			if !strings.Contains(ret.GetRetMsg(), "node-1") {
				t.Errorf("message %q does not name the node", ret.GetRetMsg())
			}
		})
	}
	if _, err := os.Stat(filepath.Join(ta.DataDir(), "..", "etc")); err == nil {
		t.Fatal("a traversal id created a directory outside the data dir")
	}
}

func TestCreateImageStatuses(t *testing.T) {
	data := []byte("0123456789abcdef")
	tests := []struct {
		status int
		ok     bool
	}{
		{http.StatusOK, true},
		{http.StatusPartialContent, true},
		{http.StatusNoContent, false},
		{http.StatusForbidden, false},
		{http.StatusInternalServerError, false},
	}
	for _, tc := range tests {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			srv := serveBytes(t, data, tc.status)
			ta := newTestAgent(t, srv.URL)
			ret := ta.create(t, ext4Spec("rfs-1", srv.URL+"/a?token=secret-q", "secret-h", data))
			if got := ret.GetRetCode() == cubeletpb.ErrorCode_Success; got != tc.ok {
				t.Fatalf("HTTP %d: ret %v, want success=%v", tc.status, ret, tc.ok)
			}
			if !tc.ok {
				if ret.GetRetCode() != cubeletpb.ErrorCode_CreateImageFailed || !strings.Contains(ret.GetRetMsg(), strconv.Itoa(tc.status)) {
					t.Fatalf("ret %v does not carry CreateImageFailed and the status", ret)
				}
				if strings.Contains(ret.GetRetMsg(), "secret-q") {
					t.Fatalf("message %q leaks the query token", ret.GetRetMsg())
				}
			}
			if l := ta.logs.String(); strings.Contains(l, "secret-q") || strings.Contains(l, "secret-h") {
				t.Fatalf("logs leak a token:\n%s", l)
			}
		})
	}
}

func TestCreateImageTokenStaysOnOriginHost(t *testing.T) {
	data := []byte("redirected ext4")
	type seenReq struct{ token, referer string }
	var mu sync.Mutex
	var seen []seenReq
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, seenReq{r.Header.Get(core.DownloadTokenHeader), r.Header.Get("Referer")})
		mu.Unlock()
		w.Write(data)
	}))
	defer target.Close()
	// The origin redirects like a data plane handing out a presigned URL.
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(core.DownloadTokenHeader) != "tok" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		http.Redirect(w, r, strings.Replace(target.URL, "127.0.0.1", "localhost", 1)+"/signed?X-Amz-Signature=abc", http.StatusFound)
	}))
	defer origin.Close()
	tests := []struct {
		name string
		url  string // the download URL; the master's carries the token in its query too
	}{
		{"header only", origin.URL + "/a"},
		{"token in query", origin.URL + core.DownloadPath + "?artifact_id=rfs-r&token=SECRET-TOKEN"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			seen = nil
			mu.Unlock()
			// Only the origin is a master: the redirect it answers with
			// is followed wherever it goes.
			ta := newTestAgent(t, origin.URL)
			if ret := ta.create(t, ext4Spec("rfs-r", tc.url, "tok", data)); ret.GetRetCode() != cubeletpb.ErrorCode_Success {
				t.Fatalf("ret %v", ret)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != 1 || seen[0].token != "" {
				t.Fatalf("redirect target saw token headers %q, want one request without a token", seen)
			}
			// Go's client would send the origin URL, query and all, as Referer.
			if seen[0].referer != "" {
				t.Fatalf("redirect target saw Referer %q, want none", seen[0].referer)
			}
		})
	}
}

func TestCreateImageReplacesCorruptFile(t *testing.T) {
	data := []byte("the real artifact")
	srv := serveBytes(t, data, http.StatusOK)
	ta := newTestAgent(t, srv.URL)
	spec := ext4Spec("rfs-c", srv.URL+"/a", "tok", data)
	if ret := ta.create(t, spec); ret.GetRetCode() != cubeletpb.ErrorCode_Success {
		t.Fatalf("ret %v", ret)
	}
	final := ta.ArtifactFile("cubebox", "rfs-c")
	// Bit rot with the same length, and no digest sidecar to trust.
	if err := os.WriteFile(final, bytes.Repeat([]byte{'x'}, len(data)), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(sidecar(final))
	if ret := ta.create(t, spec); ret.GetRetCode() != cubeletpb.ErrorCode_Success {
		t.Fatalf("ret %v", ret)
	}
	if got, _ := os.ReadFile(final); !bytes.Equal(got, data) {
		t.Fatalf("file holds %q after CreateImage, want the artifact", got)
	}
}

// The digest sidecar is gone before new bytes take the artifact's name: a
// crash (here a failing sidecar write) after the rename must not leave the
// old digest vouching for the new bytes.
func TestCreateImageNeverTrustsAStaleSidecar(t *testing.T) {
	oldData, newData := []byte("artifact, first build"), []byte("artifact, other bytes")
	var oldGets int
	var mu sync.Mutex
	oldSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		oldGets++
		mu.Unlock()
		w.Write(oldData)
	}))
	defer oldSrv.Close()
	newSrv := serveBytes(t, newData, http.StatusOK)
	ta := newTestAgent(t, oldSrv.URL, newSrv.URL)
	oldSpec := ext4Spec("rfs-s", oldSrv.URL+"/a", "tok", oldData)
	if ret := ta.create(t, oldSpec); ret.GetRetCode() != cubeletpb.ErrorCode_Success {
		t.Fatalf("ret %v", ret)
	}
	final := ta.ArtifactFile("cubebox", "rfs-s")
	// The next sidecar write fails after the new bytes are in place.
	blocker := sidecar(final) + ".tmp"
	if err := os.Mkdir(blocker, 0o755); err != nil {
		t.Fatal(err)
	}
	if ret := ta.create(t, ext4Spec("rfs-s", newSrv.URL+"/a", "tok", newData)); ret.GetRetCode() == cubeletpb.ErrorCode_Success {
		t.Fatalf("CreateImage succeeded although its sidecar write failed: %v", ret)
	}
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(final); !bytes.Equal(got, newData) {
		t.Fatalf("setup: file holds %q, want the second download", got)
	}
	if b, err := os.ReadFile(sidecar(final)); err == nil && strings.TrimSpace(string(b)) == hexSHA(oldData) {
		t.Errorf("the old digest stayed beside the new bytes")
	}
	if ret := ta.create(t, oldSpec); ret.GetRetCode() != cubeletpb.ErrorCode_Success {
		t.Fatalf("ret %v", ret)
	}
	if got, _ := os.ReadFile(final); !bytes.Equal(got, oldData) {
		t.Fatalf("file holds %q after CreateImage of the first build, want it (a stale sidecar was trusted)", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if oldGets != 2 {
		t.Errorf("%d downloads of the first build, want 2", oldGets)
	}
}

func runRequest(tid, aid string) *cubeletpb.RunCubeSandboxRequest {
	return &cubeletpb.RunCubeSandboxRequest{
		RequestID: "req-snap",
		Annotations: map[string]string{
			core.AnnotationAppSnapshotCreate: "true",
			core.AnnotationTemplateID:        tid,
		},
		InstanceType: "cubebox",
		Containers: []*cubeletpb.ContainerConfig{{
			Name: "cubebox-name-0",
			Image: &cubeletpb.ImageSpec{Image: aid, StorageMedia: "ext4", Annotations: map[string]string{
				core.AnnotationArtifactID:    aid,
				core.AnnotationArtifactToken: "leaky-token",
				core.AnnotationArtifactURL:   "http://m:8089/cube/template/artifact/download?artifact_id=" + aid + "&token=leaky-token",
				core.AnnotationImageToken:    "leaky-registry-token",
			}},
		}},
	}
}

func TestAppSnapshotRecordsTemplate(t *testing.T) {
	data := []byte("rootfs")
	srv := serveBytes(t, data, http.StatusOK)
	ta := newTestAgent(t, srv.URL)
	if ret := ta.create(t, ext4Spec("rfs-t", srv.URL+"/a", "tok", data)); ret.GetRetCode() != cubeletpb.ErrorCode_Success {
		t.Fatalf("ret %v", ret)
	}
	resp, err := ta.box.AppSnapshot(context.Background(), &cubeletpb.AppSnapshotRequest{CreateRequest: runRequest("tpl-1", "rfs-t"), SnapshotDir: "/elsewhere"})
	if err != nil || resp.GetRet().GetRetCode() != cubeletpb.ErrorCode_Success {
		t.Fatalf("AppSnapshot: %v %v", resp, err)
	}
	if resp.GetSnapshotPath() != ta.TemplateDir("tpl-1") || resp.GetSandboxID() != "sb-fixed" ||
		resp.GetTemplateID() != "tpl-1" || resp.GetRequestID() != "req-snap" || resp.GetRootfsSizeBytes() != uint64(len(data)) {
		t.Fatalf("response %v", resp)
	}
	rec, err := ta.ReadTemplate("tpl-1")
	if err != nil {
		t.Fatal(err)
	}
	if rec.NodeID != "node-1" || rec.InstanceType != "cubebox" || len(rec.ArtifactIDs) != 1 || rec.ArtifactIDs[0] != "rfs-t" ||
		rec.RootfsFiles[0] != ta.ArtifactFile("cubebox", "rfs-t") || rec.RequestedSnapshotDir != "/elsewhere" ||
		!rec.CreatedAt.Equal(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("record %+v", rec)
	}
	var cr map[string]any
	if err := json.Unmarshal(rec.CreateRequest, &cr); err != nil {
		t.Fatalf("create_request is not JSON: %v", err)
	}
	if cr["requestID"] != "req-snap" {
		t.Fatalf("create_request %v", cr)
	}
	if strings.Contains(string(rec.CreateRequest), "leaky-") {
		t.Fatalf("template.json stores a token: %s", rec.CreateRequest)
	}
	if !strings.Contains(string(rec.CreateRequest), "artifact_id="+"rfs-t") {
		t.Fatalf("template.json lost the artifact URL: %s", rec.CreateRequest)
	}
	if _, err := os.Stat("/elsewhere"); err == nil {
		t.Fatal("the requested snapshot_dir was created")
	}
}

func TestAppSnapshotRejects(t *testing.T) {
	ta := newTestAgent(t)
	tests := []struct {
		name string
		req  *cubeletpb.AppSnapshotRequest
		code cubeletpb.ErrorCode
	}{
		{"no create request", &cubeletpb.AppSnapshotRequest{}, cubeletpb.ErrorCode_InvalidParamFormat},
		{"traversal template id", &cubeletpb.AppSnapshotRequest{CreateRequest: runRequest("../x", "rfs-1")}, cubeletpb.ErrorCode_InvalidParamFormat},
		{"traversal artifact id", &cubeletpb.AppSnapshotRequest{CreateRequest: runRequest("tpl-1", "../../x")}, cubeletpb.ErrorCode_InvalidParamFormat},
		{"no ext4 container", &cubeletpb.AppSnapshotRequest{CreateRequest: func() *cubeletpb.RunCubeSandboxRequest {
			r := runRequest("tpl-1", "rfs-1")
			r.Containers[0].Image.StorageMedia = "docker"
			return r
		}()}, cubeletpb.ErrorCode_InvalidParamFormat},
		{"artifact absent", &cubeletpb.AppSnapshotRequest{CreateRequest: runRequest("tpl-1", "rfs-1")}, cubeletpb.ErrorCode_PreConditionFailed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := ta.box.AppSnapshot(context.Background(), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetRet().GetRetCode() != tc.code {
				t.Fatalf("ret %v, want %v", resp.GetRet(), tc.code)
			}
		})
	}
}

func TestCleanupTemplateNeverDeletesForeignPaths(t *testing.T) {
	ta := newTestAgent(t)
	foreign := filepath.Join(t.TempDir(), "keep")
	if err := os.MkdirAll(foreign, 0o755); err != nil {
		t.Fatal(err)
	}
	resp, err := ta.box.CleanupTemplate(context.Background(), &cubeletpb.CleanupTemplateRequest{TemplateID: "tpl-9", SnapshotPath: foreign})
	if err != nil || resp.GetRet().GetRetCode() != cubeletpb.ErrorCode_Success || resp.GetTemplateID() != "tpl-9" {
		t.Fatalf("CleanupTemplate: %v %v", resp, err)
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Fatalf("foreign snapshot path removed: %v", err)
	}
	resp, _ = ta.box.CleanupTemplate(context.Background(), &cubeletpb.CleanupTemplateRequest{TemplateID: ".."})
	if resp.GetRet().GetRetCode() != cubeletpb.ErrorCode_InvalidParamFormat {
		t.Fatalf("template id '..' gave %v", resp.GetRet())
	}
	if _, err := os.Stat(ta.DataDir()); err != nil {
		t.Fatalf("data dir gone: %v", err)
	}
}

func TestDestroyImageRemovesEveryInstanceType(t *testing.T) {
	data := []byte("x")
	srv := serveBytes(t, data, http.StatusOK)
	ta := newTestAgent(t, srv.URL)
	for _, it := range []string{"cubebox", "other"} {
		s := ext4Spec("rfs-d", srv.URL+"/a", "", data)
		s.Annotations[core.AnnotationInstanceType] = it
		if ret := ta.create(t, s); ret.GetRetCode() != cubeletpb.ErrorCode_Success {
			t.Fatalf("ret %v", ret)
		}
	}
	resp, err := ta.img.DestroyImage(context.Background(), &cubeletpb.DestroyImageRequest{Spec: &cubeletpb.ImageSpec{Image: "rfs-d"}})
	if err != nil || resp.GetRet().GetRetCode() != cubeletpb.ErrorCode_Success {
		t.Fatalf("DestroyImage: %v %v", resp, err)
	}
	for _, it := range []string{"cubebox", "other"} {
		if _, err := os.Stat(filepath.Dir(ta.ArtifactFile(it, "rfs-d"))); !os.IsNotExist(err) {
			t.Errorf("%s artifact dir still there: %v", it, err)
		}
	}
	resp, _ = ta.img.DestroyImage(context.Background(), &cubeletpb.DestroyImageRequest{Spec: &cubeletpb.ImageSpec{Image: "../templates"}})
	if resp.GetRet().GetRetCode() != cubeletpb.ErrorCode_InvalidParamFormat {
		t.Fatalf("traversal image gave %v", resp.GetRet())
	}
}

// TestRedirectDropsTokenOnDowngrade: a redirect from https to plain http,
// even on the same host, must not carry the token in clear text.
func TestRedirectDropsTokenOnDowngrade(t *testing.T) {
	tests := []struct {
		name, from, to string
		keep           bool
	}{
		{"same host and scheme", "https://master.example/d", "https://master.example/blob", true},
		{"same host, https to http", "https://master.example/d", "http://master.example/blob", false},
		{"same host, http to https", "http://master.example/d", "https://master.example/blob", true},
		{"another host", "https://master.example/d", "https://store.example/blob", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			via, _ := http.NewRequest("GET", tc.from, nil)
			req, _ := http.NewRequest("GET", tc.to, nil)
			req.Header.Set(core.DownloadTokenHeader, "tok")
			if err := dropTokenOffHost(req, []*http.Request{via}); err != nil {
				t.Fatal(err)
			}
			if got := req.Header.Get(core.DownloadTokenHeader) != ""; got != tc.keep {
				t.Fatalf("token kept = %v, want %v", got, tc.keep)
			}
		})
	}
}

// TestDestroyImageCanceledWhileWaiting: a DestroyImage whose caller gave
// up while another call held the artifact returns, and later deletes
// nothing (the master has recorded it as failed and moved on).
func TestDestroyImageCanceledWhileWaiting(t *testing.T) {
	data := []byte("x")
	srv := serveBytes(t, data, http.StatusOK)
	ta := newTestAgent(t, srv.URL)
	if ret := ta.create(t, ext4Spec("rfs-w", srv.URL+"/a", "", data)); ret.GetRetCode() != cubeletpb.ErrorCode_Success {
		t.Fatalf("ret %v", ret)
	}
	unlock, err := ta.locks.lock(context.Background(), "artifact/rfs-w")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *cubeletpb.DestroyImageResponse, 1)
	go func() {
		resp, _ := ta.img.DestroyImage(ctx, &cubeletpb.DestroyImageRequest{Spec: &cubeletpb.ImageSpec{Image: "rfs-w"}})
		done <- resp
	}()
	cancel()
	var resp *cubeletpb.DestroyImageResponse
	select {
	case resp = <-done:
	case <-time.After(time.Minute):
		unlock()
		t.Fatal("DestroyImage still waiting for the artifact after its caller gave up")
	}
	unlock()
	if resp.GetRet().GetRetCode() == cubeletpb.ErrorCode_Success {
		t.Errorf("a canceled DestroyImage answered success: %v", resp.GetRet())
	}
	if _, err := os.Stat(ta.ArtifactFile("cubebox", "rfs-w")); err != nil {
		t.Errorf("the artifact is gone after a canceled DestroyImage: %v", err)
	}
}
