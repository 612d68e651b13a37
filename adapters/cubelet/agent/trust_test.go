package agent

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cubesandbox/templatecenter/adapters/cubelet"
	"github.com/cubesandbox/templatecenter/adapters/cubelet/cubeletpb"
)

// These tests hold the agent to its trust boundary: who may call it, where
// it downloads from, what its errors give away and who may read its files.

func TestNewRefusesUnsafeConfigs(t *testing.T) {
	good := func() Config {
		return Config{DataDir: t.TempDir(), NodeID: "n", Token: testToken, MasterURLs: []string{"http://master:8089"}}
	}
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no token", func(c *Config) { c.Token = "" }, "credential is required"},
		{"short token", func(c *Config) { c.Token = "short" }, "shorter than 16"},
		{"no master URL", func(c *Config) { c.MasterURLs = nil }, "master base URL is required"},
		{"blank master URL", func(c *Config) { c.MasterURLs = []string{" "} }, "master base URL is required"},
		{"relative master URL", func(c *Config) { c.MasterURLs = []string{"master:8089"} }, "absolute http(s)"},
		{"master URL with a query", func(c *Config) { c.MasterURLs = []string{"http://master/?a=1"} }, "no user, query or fragment"},
		{"master URL with a user", func(c *Config) { c.MasterURLs = []string{"http://u:p@master/"} }, "no user, query or fragment"},
		{"file URL", func(c *Config) { c.MasterURLs = []string{"file:///srv"} }, "absolute http(s)"},
		{"mode the agent cannot write", func(c *Config) { c.FileMode = 0o440 }, "0600 at least"},
		{"mode with setuid", func(c *Config) { c.FileMode = 0o4640 }, "permission bits"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := good()
			tc.edit(&c)
			_, err := New(c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error mentioning %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "u:p") {
				t.Errorf("error %q quotes the URL's credentials", err)
			}
		})
	}
	if _, err := New(good()); err != nil {
		t.Fatalf("New with a good config: %v", err)
	}
}

// serveAgent runs the agent's authenticating server (with gRPC health, as
// agentapp adds it) on loopback and returns a plain connection to it.
func serveAgent(t *testing.T, ta *testAgent) *grpc.ClientConn {
	t.Helper()
	srv := ta.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func TestEveryCallNeedsTheNodeCredential(t *testing.T) {
	ta := newTestAgent(t)
	cc := serveAgent(t, ta)
	images, health := cubeletpb.NewImagesClient(cc), healthpb.NewHealthClient(cc)
	with := func(values ...string) context.Context {
		md := metadata.MD{}
		for _, v := range values {
			md.Append(cubelet.NodeTokenMetadata, v)
		}
		return metadata.NewOutgoingContext(context.Background(), md)
	}
	tests := []struct {
		name string
		ctx  context.Context
		ok   bool
	}{
		{"none", context.Background(), false},
		{"empty", with(""), false},
		{"wrong", with("node-token-0123456788"), false},
		{"prefix", with(testToken[:len(testToken)-1]), false},
		{"longer", with(testToken + "x"), false},
		{"twice", with(testToken, testToken), false},
		{"right and wrong", with("wrong", testToken), false},
		{"right", with(testToken), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := images.DestroyImage(tc.ctx, &cubeletpb.DestroyImageRequest{Spec: &cubeletpb.ImageSpec{Image: "rfs-auth"}})
			_, herr := health.Check(tc.ctx, &healthpb.HealthCheckRequest{})
			if tc.ok {
				if err != nil || herr != nil {
					t.Fatalf("DestroyImage: %v, health: %v; want both answered", err, herr)
				}
				return
			}
			for what, e := range map[string]error{"DestroyImage": err, "health": herr} {
				if status.Code(e) != codes.Unauthenticated {
					t.Fatalf("%s: %v, want Unauthenticated", what, e)
				}
				if !strings.Contains(e.Error(), "CUBE_NODEAGENT_TOKEN") {
					t.Errorf("%s: %q does not name the setting", what, e)
				}
			}
		})
	}
	if l := ta.logs.String(); strings.Contains(l, testToken) || !strings.Contains(l, "call refused") {
		t.Fatalf("logs quote the credential or do not record the refusals:\n%s", l)
	}
}

// canary counts connections to an address that is not a master.
type canary struct {
	ln    net.Listener
	conns atomic.Int64
}

func newCanary(t *testing.T) *canary {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &canary{ln: ln}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			c.conns.Add(1)
			conn.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return c
}

func TestCreateImageRefusesURLsOutsideTheMasters(t *testing.T) {
	can := newCanary(t)
	addr := can.ln.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	// The master's base URL has a path: only URLs under it are its.
	master := httptest.NewServer(http.NotFoundHandler())
	defer master.Close()
	ta := newTestAgent(t, master.URL+"/cube", "https://"+addr+"/secure")
	data := []byte("artifact")
	tests := []struct{ name, url string }{
		{"another port", "http://" + addr + "/cube/template/artifact/download?token=t"},
		{"another host name", "http://localhost:" + port + "/cube/a"},
		{"another scheme", "http://" + addr + "/secure/a"},
		{"outside the base path", master.URL + "/other/a"},
		{"a sibling of the base path", master.URL + "/cubeX/a"},
		{"dot segments", master.URL + "/cube/../../" + addr},
		{"escaped dot segments", master.URL + "/cube/%2e%2e/other"},
		{"user info", strings.Replace(master.URL, "http://", "http://user:pw@", 1) + "/cube/a"},
		{"metadata address", "http://169.254.169.254/latest/meta-data/"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ret := ta.create(t, ext4Spec("rfs-x", tc.url, "tok", data))
			if ret.GetRetCode() != cubeletpb.ErrorCode_InvalidParamFormat || !strings.Contains(ret.GetRetMsg(), "not under a master base URL") {
				t.Fatalf("ret %v, want InvalidParamFormat: not under a master base URL", ret)
			}
			if strings.Contains(ret.GetRetMsg(), "pw") || strings.Contains(ret.GetRetMsg(), "token=t") {
				t.Errorf("message %q quotes the URL's credentials", ret.GetRetMsg())
			}
		})
	}
	if n := can.conns.Load(); n != 0 {
		t.Fatalf("the canary saw %d connections, want none", n)
	}
	if _, err := os.Stat(filepath.Dir(ta.ArtifactFile("cubebox", "rfs-x"))); !os.IsNotExist(err) {
		t.Fatalf("a refused download left its directory: %v", err)
	}
}

func TestDownloadErrorsNeverGiveTheBodysDigestOrSize(t *testing.T) {
	secret := []byte("the bytes behind a URL the caller wants to learn about")
	srv := serveBytes(t, secret, http.StatusOK)
	ta := newTestAgent(t, srv.URL)
	claimed := []byte("whatever the caller claims")
	tests := []struct {
		name string
		size int
	}{
		{"same size", len(secret)},
		{"smaller size", 5},
		{"larger size", len(secret) + 1000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := ext4Spec("rfs-leak", srv.URL+"/a", "tok", claimed)
			spec.Annotations["cube.master.rootfs.artifact.size_bytes"] = strconv.Itoa(tc.size)
			ret := ta.create(t, spec)
			if ret.GetRetCode() != cubeletpb.ErrorCode_CreateImageFailed {
				t.Fatalf("ret %v, want CreateImageFailed", ret)
			}
			msg := ret.GetRetMsg()
			if !strings.Contains(msg, "does not match the expected") {
				t.Errorf("message %q does not say what did not match", msg)
			}
			if sum := hexSHA(secret); strings.Contains(strings.ToLower(msg), sum) || strings.Contains(msg, sum[:16]) {
				t.Fatalf("message %q gives the downloaded body's sha256 %s", msg, sum)
			}
			if regexp.MustCompile(`\b`+strconv.Itoa(len(secret))+`\b`).MatchString(msg) && tc.size != len(secret) {
				t.Fatalf("message %q gives the downloaded body's size %d", msg, len(secret))
			}
		})
	}
}

func TestPresenceCheckNeverDownloads(t *testing.T) {
	data := []byte("held artifact")
	var gets atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gets.Add(1)
		w.Write(data)
	}))
	defer srv.Close()
	ta := newTestAgent(t, srv.URL)
	if ret := ta.create(t, ext4Spec("rfs-p", srv.URL+"/a", "tok", data)); ret.GetRetCode() != cubeletpb.ErrorCode_Success {
		t.Fatalf("ret %v", ret)
	}
	check := func(id string, held []byte) *cubeletpb.Ret {
		spec := ext4Spec(id, "", "", held)
		delete(spec.Annotations, "cube.master.rootfs.artifact.url")
		return ta.create(t, spec)
	}
	tests := []struct {
		name string
		id   string
		held []byte
		ok   bool
	}{
		{"held", "rfs-p", data, true},
		{"other bytes expected", "rfs-p", []byte("other artifact"), false},
		{"never held", "rfs-none", data, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ret := check(tc.id, tc.held)
			if tc.ok {
				if ret.GetRetCode() != cubeletpb.ErrorCode_Success {
					t.Fatalf("ret %v, want success", ret)
				}
				return
			}
			// The master's client reads "does not exist" as not found,
			// as it reads a Cubelet's answer.
			if ret.GetRetCode() == cubeletpb.ErrorCode_Success || !strings.Contains(ret.GetRetMsg(), "does not exist") {
				t.Fatalf("ret %v, want a failure saying the artifact does not exist", ret)
			}
		})
	}
	if n := gets.Load(); n != 1 {
		t.Fatalf("%d downloads, want the one distribution", n)
	}
	if got, err := os.ReadFile(ta.ArtifactFile("cubebox", "rfs-p")); err != nil || string(got) != string(data) {
		t.Fatalf("a failed presence check touched the held artifact: %q, %v", got, err)
	}
}

func TestFilesAreNotWorldReadable(t *testing.T) {
	data := []byte("rootfs bytes")
	srv := serveBytes(t, data, http.StatusOK)
	// Modes are set explicitly: a permissive umask changes nothing.
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	tests := []struct {
		name              string
		mode              os.FileMode
		wantFile, wantDir os.FileMode
	}{
		{"default", 0, 0o640, 0o750},
		{"for a Cubelet of another user", 0o644, 0o644, 0o755},
		{"owner only", 0o600, 0o600, 0o700},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ta := newTestAgent(t, srv.URL)
			ta.cfg.FileMode = DefaultFileMode
			if tc.mode != 0 {
				ta.cfg.FileMode, ta.dirMode = tc.mode, dirModeOf(tc.mode)
			}
			if ret := ta.create(t, ext4Spec("rfs-m", srv.URL+"/a", "tok", data)); ret.GetRetCode() != cubeletpb.ErrorCode_Success {
				t.Fatalf("ret %v", ret)
			}
			if resp, err := ta.box.AppSnapshot(context.Background(), &cubeletpb.AppSnapshotRequest{CreateRequest: runRequest("tpl-m", "rfs-m")}); err != nil || resp.GetRet().GetRetCode() != cubeletpb.ErrorCode_Success {
				t.Fatalf("AppSnapshot: %v %v", resp, err)
			}
			final := ta.ArtifactFile("cubebox", "rfs-m")
			files := []string{final, sidecar(final), filepath.Join(ta.TemplateDir("tpl-m"), TemplateFile)}
			dirs := []string{filepath.Dir(final), filepath.Dir(filepath.Dir(final)), ta.TemplateDir("tpl-m")}
			if tc.mode == 0 {
				dirs = append(dirs, filepath.Join(ta.DataDir(), templatesDir))
			}
			for _, p := range files {
				if st, err := os.Stat(p); err != nil || st.Mode().Perm() != tc.wantFile {
					t.Errorf("%s: %v, want mode %#o (err %v)", p, modeOf(st), tc.wantFile, err)
				}
			}
			for _, p := range dirs {
				if st, err := os.Stat(p); err != nil || st.Mode().Perm() != tc.wantDir {
					t.Errorf("%s: %v, want mode %#o (err %v)", p, modeOf(st), tc.wantDir, err)
				}
			}
		})
	}
}

func modeOf(st os.FileInfo) any {
	if st == nil {
		return "missing"
	}
	return st.Mode().Perm()
}

// TestUnimplementedMethodsAreRefusedToo: the credential check runs before
// any handler, so a Cubelet method the agent does not implement is refused
// the same way (a stranger learns nothing about what the agent serves).
func TestUnimplementedMethodsAreRefusedToo(t *testing.T) {
	ta := newTestAgent(t)
	cc := serveAgent(t, ta)
	err := cc.Invoke(context.Background(), "/cubelet.services.cubebox.v1.CubeboxMgr/Exec", &cubeletpb.CleanupTemplateRequest{}, &cubeletpb.CleanupTemplateResponse{})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("unimplemented method without a credential: %v, want Unauthenticated", err)
	}
}
