package cubelet

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cubesandbox/templatecenter/adapters/cubelet/cubeletpb"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/nodeagenttest"
)

// fakeCubelet answers every call with a preset Ret (or gRPC error) and
// records what it received.
type fakeCubelet struct {
	cubeletpb.UnimplementedImagesServer
	cubeletpb.UnimplementedCubeboxMgrServer

	mu        sync.Mutex
	ret       *cubeletpb.Ret
	grpcErr   error
	lastImage *cubeletpb.ImageSpec
	lastSnap  *cubeletpb.AppSnapshotRequest
	lastClean *cubeletpb.CleanupTemplateRequest
	deadlines map[string]time.Duration // method -> time left at arrival; absent = none
	// unavailable calls answer Unavailable before any other; the rest take
	// delay (a download) before answering.
	unavailable int
	delay       time.Duration
}

func (f *fakeCubelet) record(ctx context.Context, method string) (*cubeletpb.Ret, error) {
	f.mu.Lock()
	if f.unavailable > 0 {
		f.unavailable--
		f.mu.Unlock()
		return nil, status.Error(codes.Unavailable, "node restarting")
	}
	if d, ok := ctx.Deadline(); ok {
		f.deadlines[method] = time.Until(d)
	} else {
		delete(f.deadlines, method)
	}
	ret, err, delay := f.ret, f.grpcErr, f.delay
	f.mu.Unlock()
	select {
	case <-time.After(delay):
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return ret, err
}

func (f *fakeCubelet) CreateImage(ctx context.Context, r *cubeletpb.CreateImageRequest) (*cubeletpb.CreateImageRequestResponse, error) {
	ret, err := f.record(ctx, "CreateImage")
	f.mu.Lock()
	f.lastImage = r.GetSpec()
	f.mu.Unlock()
	return &cubeletpb.CreateImageRequestResponse{RequestID: r.GetRequestID(), Ret: ret}, err
}

func (f *fakeCubelet) DestroyImage(ctx context.Context, r *cubeletpb.DestroyImageRequest) (*cubeletpb.DestroyImageResponse, error) {
	ret, err := f.record(ctx, "DestroyImage")
	f.mu.Lock()
	f.lastImage = r.GetSpec()
	f.mu.Unlock()
	return &cubeletpb.DestroyImageResponse{RequestID: r.GetRequestID(), Ret: ret}, err
}

func (f *fakeCubelet) AppSnapshot(ctx context.Context, r *cubeletpb.AppSnapshotRequest) (*cubeletpb.AppSnapshotResponse, error) {
	ret, err := f.record(ctx, "AppSnapshot")
	f.mu.Lock()
	f.lastSnap = r
	f.mu.Unlock()
	return &cubeletpb.AppSnapshotResponse{Ret: ret, SandboxID: "sb", TemplateID: "tpl-1", SnapshotPath: "/snap/tpl-1",
		GuestImageVersion: "g1", AgentVersion: "a1", KernelVersion: "k1", EnvdVersion: "e1"}, err
}

func (f *fakeCubelet) CleanupTemplate(ctx context.Context, r *cubeletpb.CleanupTemplateRequest) (*cubeletpb.CleanupTemplateResponse, error) {
	ret, err := f.record(ctx, "CleanupTemplate")
	f.mu.Lock()
	f.lastClean = r
	f.mu.Unlock()
	return &cubeletpb.CleanupTemplateResponse{Ret: ret, TemplateID: r.GetTemplateID()}, err
}

func (f *fakeCubelet) set(ret *cubeletpb.Ret, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ret, f.grpcErr = ret, err
}

func startFake(t *testing.T) (*fakeCubelet, ports.Node) {
	t.Helper()
	f := &fakeCubelet{deadlines: map[string]time.Duration{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	cubeletpb.RegisterImagesServer(s, f)
	cubeletpb.RegisterCubeboxMgrServer(s, f)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return f, ports.Node{ID: "node-7", Addr: lis.Addr().String(), InstanceType: "cubebox"}
}

func quietClient(opts Options) *Client {
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return New(opts)
}

func ret(code cubeletpb.ErrorCode, msg string) *cubeletpb.Ret {
	return &cubeletpb.Ret{RetCode: code, RetMsg: msg}
}

func TestRetCodesBecomeErrors(t *testing.T) {
	f, node := startFake(t)
	c := quietClient(Options{})
	defer c.Close()
	ctx := context.Background()
	spec := core.NodeArtifact{ArtifactID: "rfs-1"}
	snap := nodeagenttest.SandboxRequest("tpl-1", "rfs-1", "cubebox")

	calls := map[string]func() error{
		"CreateImage":     func() error { return c.CreateImage(ctx, node, spec) },
		"DestroyImage":    func() error { return c.DestroyImage(ctx, node, "rfs-1") },
		"AppSnapshot":     func() error { _, err := c.AppSnapshot(ctx, node, snap, ""); return err },
		"CleanupTemplate": func() error { return c.CleanupTemplate(ctx, node, "tpl-1", "") },
	}
	tests := []struct {
		name string
		ret  *cubeletpb.Ret
		// which calls must succeed; the others must fail
		ok []string
	}{
		{"200", ret(cubeletpb.ErrorCode_Success, "success"), []string{"CreateImage", "DestroyImage", "AppSnapshot", "CleanupTemplate"}},
		{"0 from a peer that leaves it unset", ret(cubeletpb.ErrorCode_OK, ""), []string{"CreateImage", "DestroyImage", "AppSnapshot", "CleanupTemplate"}},
		// Upstream: CreateImage and AppSnapshot need a ret; the cleanups do not.
		{"no ret at all", nil, []string{"DestroyImage", "CleanupTemplate"}},
		{"failure", ret(cubeletpb.ErrorCode_CreateImageFailed, "disk on fire"), nil},
		{"undeclared code", ret(130999, "new failure"), nil},
		{"no such image", ret(cubeletpb.ErrorCode_DestroyImageFailed, "remove image: No such image: rfs-1"), []string{"DestroyImage", "CleanupTemplate"}},
		{"not found", ret(cubeletpb.ErrorCode_Unknown, "template tpl-1 not found"), []string{"DestroyImage", "CleanupTemplate"}},
		{"snapshot does not exist", ret(cubeletpb.ErrorCode_AppSnapshotNotExist, "gone"), []string{"DestroyImage", "CleanupTemplate"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f.set(tc.ret, nil)
			for method, call := range calls {
				err := call()
				wantOK := false
				for _, m := range tc.ok {
					wantOK = wantOK || m == method
				}
				if wantOK != (err == nil) {
					t.Errorf("%s: err = %v, want success=%v", method, err, wantOK)
					continue
				}
				if err == nil {
					continue
				}
				if tc.ret == nil {
					if !errors.Is(err, ErrNoRet) || !strings.Contains(err.Error(), "node-7") {
						t.Errorf("%s: err = %v, want ErrNoRet naming node-7", method, err)
					}
					continue
				}
				var re *RetError
				if !errors.As(err, &re) || re.NodeID != "node-7" || re.Method != method || re.Code != tc.ret.GetRetCode() {
					t.Errorf("%s: err = %#v, want a RetError for node-7", method, err)
				}
				if !strings.Contains(err.Error(), "node-7") || !strings.Contains(err.Error(), tc.ret.GetRetMsg()) {
					t.Errorf("%s: %q does not name the node and carry ret_msg", method, err)
				}
			}
		})
	}
}

func TestTransportErrors(t *testing.T) {
	f, node := startFake(t)
	c := quietClient(Options{})
	defer c.Close()
	ctx := context.Background()

	f.set(nil, status.Error(codes.NotFound, "no such template"))
	if err := c.CleanupTemplate(ctx, node, "tpl-1", ""); err != nil {
		t.Errorf("CleanupTemplate with gRPC NotFound: %v", err)
	}
	if err := c.DestroyImage(ctx, node, "rfs-1"); err != nil {
		t.Errorf("DestroyImage with gRPC NotFound: %v", err)
	}
	if err := c.CreateImage(ctx, node, core.NodeArtifact{ArtifactID: "rfs-1"}); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("CreateImage with gRPC NotFound: %v", err)
	}

	f.set(nil, status.Error(codes.Internal, "boom"))
	err := c.CleanupTemplate(ctx, node, "tpl-1", "")
	if err == nil || !strings.Contains(err.Error(), "node-7") || status.Code(errors.Unwrap(err)) != codes.Internal {
		t.Errorf("CleanupTemplate with gRPC Internal: %v", err)
	}

	// Nothing listens here.
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ports.Node{ID: "node-dead", Addr: lis.Addr().String()}
	lis.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.DestroyImage(cctx, dead, "rfs-1"); err == nil || !strings.Contains(err.Error(), "node-dead") {
		t.Errorf("DestroyImage on a dead node: %v", err)
	}
}

func TestRequestsCarryWhatUpstreamSends(t *testing.T) {
	f, node := startFake(t)
	f.set(ret(cubeletpb.ErrorCode_Success, ""), nil)
	c := quietClient(Options{NewRequestID: func() string { return "rid" }})
	defer c.Close()
	ctx := context.Background()

	if err := c.CreateImage(ctx, node, core.NodeArtifact{ArtifactID: "rfs-1", DownloadURL: "http://x", InstanceType: "gpu"}); err != nil {
		t.Fatal(err)
	}
	if f.lastImage.GetAnnotations()[core.AnnotationInstanceType] != "gpu" || f.lastImage.GetStorageMedia() != "ext4" || f.lastImage.GetImage() != "rfs-1" ||
		f.lastImage.GetAnnotations()[core.AnnotationArtifactURL] != "http://x" {
		t.Errorf("CreateImage spec %v", f.lastImage)
	}

	if err := c.DestroyImage(ctx, node, "rfs-1"); err != nil {
		t.Fatal(err)
	}
	if f.lastImage.GetImage() != "rfs-1" || f.lastImage.GetStorageMedia() != "" || len(f.lastImage.GetAnnotations()) != 0 {
		t.Errorf("DestroyImage spec %v, want only the image", f.lastImage)
	}

	res, err := c.AppSnapshot(ctx, node, nodeagenttest.SandboxRequest("tpl-1", "rfs-1", "cubebox"), "/custom")
	if err != nil {
		t.Fatal(err)
	}
	if res != (ports.SnapshotResult{SandboxID: "sb", TemplateID: "tpl-1", SnapshotPath: "/snap/tpl-1", GuestImageVersion: "g1", AgentVersion: "a1", KernelVersion: "k1"}) {
		t.Errorf("result %+v", res)
	}
	if f.lastSnap.GetSnapshotDir() != "/custom" || f.lastSnap.GetCreateRequest().GetContainers()[0].GetImage().GetImage() != "rfs-1" ||
		f.lastSnap.GetBackend() != "" {
		t.Errorf("AppSnapshot request %v", f.lastSnap)
	}
	withBackend := nodeagenttest.SandboxRequest("tpl-1", "rfs-1", "cubebox")
	withBackend.Annotations[core.AnnotationStorageBackend] = " s3 "
	if _, err := c.AppSnapshot(ctx, node, withBackend, ""); err != nil {
		t.Fatal(err)
	}
	if f.lastSnap.GetBackend() != "s3" {
		t.Errorf("AppSnapshot backend %q, want the annotation's, trimmed", f.lastSnap.GetBackend())
	}

	if err := c.CleanupTemplate(ctx, node, "tpl-1", "/snap/tpl-1"); err != nil {
		t.Fatal(err)
	}
	if f.lastClean.GetTemplateID() != "tpl-1" || f.lastClean.GetSnapshotPath() != "/snap/tpl-1" || f.lastClean.GetRequestID() != "rid" {
		t.Errorf("CleanupTemplate request %v", f.lastClean)
	}
}

func TestTimeouts(t *testing.T) {
	f, node := startFake(t)
	f.set(ret(cubeletpb.ErrorCode_Success, ""), nil)
	ctx := context.Background()
	snap := nodeagenttest.SandboxRequest("tpl-1", "rfs-1", "cubebox")

	c := quietClient(Options{})
	defer c.Close()
	c.CreateImage(ctx, node, core.NodeArtifact{ArtifactID: "rfs-1"})
	c.DestroyImage(ctx, node, "rfs-1")
	c.AppSnapshot(ctx, node, snap, "")
	c.CleanupTemplate(ctx, node, "tpl-1", "")
	f.mu.Lock()
	for _, m := range []string{"CreateImage", "DestroyImage"} {
		if d, ok := f.deadlines[m]; !ok || d <= 0 || d > DefaultImageTimeout {
			t.Errorf("%s: deadline %v (set=%v), want within the default %v", m, d, ok, DefaultImageTimeout)
		}
	}
	for _, m := range []string{"AppSnapshot", "CleanupTemplate"} {
		if d, ok := f.deadlines[m]; ok {
			t.Errorf("%s: deadline %v, want none by default", m, d)
		}
	}
	f.mu.Unlock()

	c2 := quietClient(Options{AppSnapshotTimeout: time.Hour, CleanupTemplateTimeout: time.Hour, CreateImageTimeout: 2 * time.Hour})
	defer c2.Close()
	c2.CreateImage(ctx, node, core.NodeArtifact{ArtifactID: "rfs-1"})
	c2.AppSnapshot(ctx, node, snap, "")
	c2.CleanupTemplate(ctx, node, "tpl-1", "")
	f.mu.Lock()
	defer f.mu.Unlock()
	if d := f.deadlines["CreateImage"]; d <= DefaultImageTimeout || d > 2*time.Hour {
		t.Errorf("CreateImage deadline %v, want the configured 2h", d)
	}
	for _, m := range []string{"AppSnapshot", "CleanupTemplate"} {
		if d, ok := f.deadlines[m]; !ok || d > time.Hour {
			t.Errorf("%s: deadline %v (set=%v), want within 1h", m, d, ok)
		}
	}
}

func TestConnectionsAreCachedAndClosed(t *testing.T) {
	f, node := startFake(t)
	f.set(ret(cubeletpb.ErrorCode_Success, ""), nil)
	_, other := startFake(t)
	c := quietClient(Options{})
	ctx := context.Background()
	for range 3 {
		if err := c.DestroyImage(ctx, node, "rfs-1"); err != nil {
			t.Fatal(err)
		}
	}
	c.DestroyImage(ctx, other, "rfs-1")
	c.mu.Lock()
	n := len(c.conns)
	c.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d cached connections for 2 addresses", n)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.DestroyImage(ctx, node, "rfs-1"); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after Close: %v", err)
	}
}

func TestBadArguments(t *testing.T) {
	c := quietClient(Options{})
	defer c.Close()
	ctx := context.Background()
	node := ports.Node{ID: "n1", Addr: "127.0.0.1:1"}
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"no address", c.DestroyImage(ctx, ports.Node{ID: "n1"}, "rfs-1"), core.ErrInvalidArgument},
		{"no image", c.CreateImage(ctx, node, core.NodeArtifact{}), core.ErrInvalidArgument},
		{"no image to destroy", c.DestroyImage(ctx, node, ""), core.ErrInvalidArgument},
		{"no template id", c.CleanupTemplate(ctx, node, "", ""), core.ErrTemplateIDRequired},
		{"no containers", func() error { _, err := c.AppSnapshot(ctx, node, &core.SandboxRequest{}, ""); return err }(), core.ErrInvalidArgument},
		{"nil request", func() error { _, err := c.AppSnapshot(ctx, node, nil, ""); return err }(), core.ErrInvalidArgument},
	}
	for _, tc := range tests {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, tc.err, tc.want)
		}
	}
}

// A node that was down and came back on the same address must be reachable
// by the next call, not after the connection's reconnect backoff: redo of a
// node's failed replica runs right after the node returns.
func TestNodeBackAfterOutage(t *testing.T) {
	f, node := startFake(t)
	f.set(ret(cubeletpb.ErrorCode_Success, ""), nil)
	c := quietClient(Options{})
	defer c.Close()
	ctx := context.Background()
	if err := c.DestroyImage(ctx, node, "rfs-1"); err != nil {
		t.Fatalf("first call: %v", err)
	}

	// Take the node down: stop the server that owns the address.
	srv := grpc.NewServer()
	cubeletpb.RegisterImagesServer(srv, f)
	cubeletpb.RegisterCubeboxMgrServer(srv, f)
	down := ports.Node{ID: "node-8", Addr: freeAddr(t)}
	lis, err := net.Listen("tcp", down.Addr)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	if err := c.DestroyImage(ctx, down, "rfs-1"); err != nil {
		t.Fatalf("before the outage: %v", err)
	}
	srv.Stop()
	for i := 0; i < 3; i++ { // drive the connection into backoff
		if err := c.DestroyImage(ctx, down, "rfs-1"); err == nil {
			t.Fatal("call to a stopped node succeeded")
		}
	}

	// Back on the same address.
	lis, err = net.Listen("tcp", down.Addr)
	if err != nil {
		t.Fatal(err)
	}
	srv = grpc.NewServer()
	cubeletpb.RegisterImagesServer(srv, f)
	cubeletpb.RegisterCubeboxMgrServer(srv, f)
	go srv.Serve(lis)
	defer srv.Stop()
	if err := c.CreateImage(ctx, down, core.NodeArtifact{ArtifactID: "rfs-1"}); err != nil {
		t.Fatalf("first call after the node came back: %v", err)
	}
}

// The retry after Unavailable waits reconnectWait for the node, not for the
// whole call: a download that outlasts the wait still gets the call's
// timeout.
func TestRetryAfterUnavailable(t *testing.T) {
	const wait = 50 * time.Millisecond
	tests := []struct {
		name        string
		unavailable int
		delay       time.Duration
		wantCode    codes.Code // codes.OK: success
	}{
		{"node back, quick answer", 1, 0, codes.OK},
		{"node back, download outlasts the wait", 1, 6 * wait, codes.OK},
		{"node still unavailable", 2, 0, codes.Unavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, node := startFake(t)
			f.set(ret(cubeletpb.ErrorCode_Success, ""), nil)
			f.unavailable, f.delay = tc.unavailable, tc.delay
			c := quietClient(Options{})
			c.reconnectWait = wait
			defer c.Close()
			err := c.CreateImage(context.Background(), node, core.NodeArtifact{ArtifactID: "rfs-1"})
			if got := status.Code(errors.Unwrap(err)); got != tc.wantCode {
				t.Fatalf("CreateImage: %v (code %v), want code %v", err, got, tc.wantCode)
			}
			if tc.wantCode != codes.OK {
				return
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if d := f.deadlines["CreateImage"]; d <= wait || d > DefaultImageTimeout {
				t.Errorf("retried CreateImage had %v left, want the call's timeout %v", d, DefaultImageTimeout)
			}
		})
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
