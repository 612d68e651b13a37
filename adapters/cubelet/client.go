package cubelet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/cubesandbox/templatecenter/adapters/cubelet/cubeletpb"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// DefaultImageTimeout bounds CreateImage and DestroyImage, like upstream's
// create_image_timeout_insec.
const DefaultImageTimeout = 300 * time.Second

// Options configures a Client. The zero value is usable.
type Options struct {
	// CreateImageTimeout and DestroyImageTimeout bound each call; 0 means
	// DefaultImageTimeout.
	CreateImageTimeout  time.Duration
	DestroyImageTimeout time.Duration
	// AppSnapshotTimeout and CleanupTemplateTimeout bound each call; 0
	// means only the caller's context applies (upstream sets none).
	AppSnapshotTimeout     time.Duration
	CleanupTemplateTimeout time.Duration
	// DialOptions are added to every connection. Without a
	// grpc.WithTransportCredentials option the client uses insecure
	// credentials: node agents sit on the internal network.
	DialOptions []grpc.DialOption
	// Secure reports that DialOptions carry transport credentials, so the
	// insecure default is not added.
	Secure bool
	// NewRequestID makes the requestID of each call (default: a UUID).
	NewRequestID func() string
	// Request shapes the sandbox requests AppSnapshot sends; nil means
	// DefaultRequestOptions.
	Request *RequestOptions
	// Logger receives one debug line per call (default: slog.Default()).
	Logger *slog.Logger
}

// Client implements ports.NodeAgent over the Cubelet gRPC protocol. It keeps
// one connection per node address; Close closes them all.
type Client struct {
	opts Options
	log  *slog.Logger
	// reconnectWait is a seam for tests; New sets it to reconnectWait.
	reconnectWait time.Duration

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
}

var _ ports.NodeAgent = (*Client)(nil)

// New returns a Client. Connections are made lazily, on the first call to
// each address.
func New(opts Options) *Client {
	if opts.CreateImageTimeout <= 0 {
		opts.CreateImageTimeout = DefaultImageTimeout
	}
	if opts.DestroyImageTimeout <= 0 {
		opts.DestroyImageTimeout = DefaultImageTimeout
	}
	if opts.NewRequestID == nil {
		opts.NewRequestID = uuid.NewString
	}
	if opts.Request == nil {
		d := DefaultRequestOptions()
		opts.Request = &d
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Client{opts: opts, log: log.With("component", "cubelet-client"), reconnectWait: reconnectWait, conns: map[string]*grpc.ClientConn{}}
}

// ErrClosed is returned by calls made after Close.
var ErrClosed = errors.New("cubelet client is closed")

// Close closes every cached connection. Calls after Close fail with
// ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var errs []error
	for addr, cc := range c.conns {
		if err := cc.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", addr, err))
		}
	}
	clear(c.conns)
	return errors.Join(errs...)
}

// conn returns the cached connection to the node's agent, creating it.
func (c *Client) conn(node ports.Node) (*grpc.ClientConn, error) {
	if node.Addr == "" {
		return nil, fmt.Errorf("node %s: %w", node.ID, &core.FieldError{Field: "node.addr", Reason: "is empty; the node agent address is unknown"})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if cc, ok := c.conns[node.Addr]; ok {
		return cc, nil
	}
	// Nodes come back after outages; keep the reconnect backoff short so a
	// returning node is reachable within seconds, not minutes.
	opts := append([]grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 200 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
		MinConnectTimeout: 5 * time.Second,
	})}, c.opts.DialOptions...)
	if !c.opts.Secure {
		opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	}
	cc, err := grpc.NewClient(node.Addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("node %s: dial %s: %w", node.ID, node.Addr, err)
	}
	c.conns[node.Addr] = cc
	return cc, nil
}

// reconnectWait bounds the wait for an unreachable node before the one
// retry.
const reconnectWait = 3 * time.Second

// call runs one RPC. If the node was unreachable (Unavailable: the request
// never reached a server, or the connection broke), it wakes the
// connection out of its reconnect backoff, waits up to wait for it to be
// ready and retries once under ctx alone: the wait bounds reaching the
// node, not the call (a CreateImage download takes minutes). All four RPCs
// are idempotent on the node, so the retry is safe; a node that stays down
// still fails within seconds.
func call[T any](ctx context.Context, cc *grpc.ClientConn, wait time.Duration, rpc func(ctx context.Context, opts ...grpc.CallOption) (T, error)) (T, error) {
	resp, err := rpc(ctx)
	if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
		return resp, err
	}
	cc.ResetConnectBackoff()
	if !waitReady(ctx, cc, wait) {
		return resp, err
	}
	// No WaitForReady: if the connection fails again the retry fails fast
	// instead of waiting out ctx.
	return rpc(ctx)
}

// waitReady reports whether cc became ready within wait.
func waitReady(ctx context.Context, cc *grpc.ClientConn, wait time.Duration) bool {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	cc.Connect() // an idle connection does not dial by itself
	for {
		s := cc.GetState()
		switch s {
		case connectivity.Ready:
			return true
		case connectivity.Shutdown:
			return false
		}
		if !cc.WaitForStateChange(wctx, s) {
			return false
		}
	}
}

func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// CreateImage asks the node to fetch and store the ext4 artifact art
// describes (ImageSpecOf maps it onto the wire).
func (c *Client) CreateImage(ctx context.Context, node ports.Node, art core.NodeArtifact) error {
	if art.ArtifactID == "" {
		return fmt.Errorf("node %s: %w", node.ID, &core.FieldError{Field: "artifact_id", Reason: "is required"})
	}
	cc, err := c.conn(node)
	if err != nil {
		return err
	}
	req := &cubeletpb.CreateImageRequest{RequestID: c.opts.NewRequestID(), Spec: ImageSpecOf(art)}
	ctx, cancel := withTimeout(ctx, c.opts.CreateImageTimeout)
	defer cancel()
	start := time.Now()
	resp, err := call(ctx, cc, c.reconnectWait, func(ctx context.Context, o ...grpc.CallOption) (*cubeletpb.CreateImageRequestResponse, error) {
		return cubeletpb.NewImagesClient(cc).CreateImage(ctx, req, o...)
	})
	err = c.result(node, "CreateImage", req.RequestID, resp.GetRet(), err, true)
	c.log.Debug("CreateImage", "node", node.ID, "addr", node.Addr, "image", art.ArtifactID, "request_id", req.RequestID, "elapsed", time.Since(start), "err", err)
	return err
}

// DestroyImage asks the node to remove the artifact. A node that does not
// have it ("not found", "no such image") counts as success.
func (c *Client) DestroyImage(ctx context.Context, node ports.Node, image string) error {
	if image == "" {
		return fmt.Errorf("node %s: %w", node.ID, &core.FieldError{Field: "image", Reason: "is required (the artifact id)"})
	}
	cc, err := c.conn(node)
	if err != nil {
		return err
	}
	// Upstream sends only the image: no storage media, no namespace.
	req := &cubeletpb.DestroyImageRequest{RequestID: c.opts.NewRequestID(), Spec: &cubeletpb.ImageSpec{Image: image}}
	ctx, cancel := withTimeout(ctx, c.opts.DestroyImageTimeout)
	defer cancel()
	resp, err := call(ctx, cc, c.reconnectWait, func(ctx context.Context, o ...grpc.CallOption) (*cubeletpb.DestroyImageResponse, error) {
		return cubeletpb.NewImagesClient(cc).DestroyImage(ctx, req, o...)
	})
	err = c.result(node, "DestroyImage", req.RequestID, resp.GetRet(), err, false)
	if isNotFound(err) {
		c.log.Debug("DestroyImage: node does not have the image", "node", node.ID, "image", image, "err", err)
		return nil
	}
	c.log.Debug("DestroyImage", "node", node.ID, "image", image, "request_id", req.RequestID, "err", err)
	return err
}

// AppSnapshot maps the sandbox create request with Options.Request and
// asks the node to build its local run template. The snapshot request
// carries the request's backend (SnapshotBackend), as upstream sends it.
func (c *Client) AppSnapshot(ctx context.Context, node ports.Node, sreq *core.SandboxRequest, snapshotDir string) (ports.SnapshotResult, error) {
	run, err := c.opts.Request.RunRequest(sreq)
	if err != nil {
		return ports.SnapshotResult{}, fmt.Errorf("node %s: AppSnapshot: %w", node.ID, err)
	}
	if run.RequestID == "" {
		run.RequestID = c.opts.NewRequestID()
	}
	cc, err := c.conn(node)
	if err != nil {
		return ports.SnapshotResult{}, err
	}
	ctx, cancel := withTimeout(ctx, c.opts.AppSnapshotTimeout)
	defer cancel()
	areq := &cubeletpb.AppSnapshotRequest{CreateRequest: run, SnapshotDir: snapshotDir, Backend: SnapshotBackend(sreq)}
	resp, err := call(ctx, cc, c.reconnectWait, func(ctx context.Context, o ...grpc.CallOption) (*cubeletpb.AppSnapshotResponse, error) {
		return cubeletpb.NewCubeboxMgrClient(cc).AppSnapshot(ctx, areq, o...)
	})
	if err := c.result(node, "AppSnapshot", run.RequestID, resp.GetRet(), err, true); err != nil {
		return ports.SnapshotResult{}, err
	}
	c.log.Debug("AppSnapshot", "node", node.ID, "template_id", resp.GetTemplateID(), "snapshot_path", resp.GetSnapshotPath())
	return ports.SnapshotResult{
		SandboxID: resp.GetSandboxID(), TemplateID: resp.GetTemplateID(), SnapshotPath: resp.GetSnapshotPath(),
		GuestImageVersion: resp.GetGuestImageVersion(), AgentVersion: resp.GetAgentVersion(), KernelVersion: resp.GetKernelVersion(),
		ShimVersion: resp.GetShimVersion(),
	}, nil
}

// CleanupTemplate asks the node to remove its template. A template the node
// does not have counts as success.
func (c *Client) CleanupTemplate(ctx context.Context, node ports.Node, templateID, snapshotPath string) error {
	if templateID == "" {
		return fmt.Errorf("node %s: %w", node.ID, core.ErrTemplateIDRequired)
	}
	cc, err := c.conn(node)
	if err != nil {
		return err
	}
	req := &cubeletpb.CleanupTemplateRequest{RequestID: c.opts.NewRequestID(), TemplateID: templateID, SnapshotPath: snapshotPath}
	ctx, cancel := withTimeout(ctx, c.opts.CleanupTemplateTimeout)
	defer cancel()
	resp, err := call(ctx, cc, c.reconnectWait, func(ctx context.Context, o ...grpc.CallOption) (*cubeletpb.CleanupTemplateResponse, error) {
		return cubeletpb.NewCubeboxMgrClient(cc).CleanupTemplate(ctx, req, o...)
	})
	err = c.result(node, "CleanupTemplate", req.RequestID, resp.GetRet(), err, false)
	if isNotFound(err) {
		return nil
	}
	c.log.Debug("CleanupTemplate", "node", node.ID, "template_id", templateID, "err", err)
	return err
}

// RetError is a Cubelet answer whose ret_code is not success.
type RetError struct {
	NodeID    string
	Method    string
	RequestID string
	Code      cubeletpb.ErrorCode
	Msg       string
}

func (e *RetError) Error() string {
	return fmt.Sprintf("node %s: %s (request %s): ret_code %d: %s", e.NodeID, e.Method, e.RequestID, int32(e.Code), e.Msg)
}

// Unwrap maps a "does not exist" answer to core.ErrNotFound.
func (e *RetError) Unwrap() error {
	if e.Code == cubeletpb.ErrorCode_AppSnapshotNotExist || notFoundText(e.Msg) {
		return core.ErrNotFound
	}
	return nil
}

// ErrNoRet is a reply without a ret where upstream requires one.
var ErrNoRet = errors.New("the node answered without a ret")

// result turns a call's outcome into nil or an error naming the node.
// requireRet follows upstream: a CreateImage or AppSnapshot reply without a
// ret is a failure, a DestroyImage or CleanupTemplate one is not.
func (c *Client) result(node ports.Node, method, requestID string, ret *cubeletpb.Ret, err error, requireRet bool) error {
	if err != nil {
		if s, ok := status.FromError(err); ok && s.Code() == codes.NotFound {
			return fmt.Errorf("node %s (%s): %s: %w: %s", node.ID, node.Addr, method, core.ErrNotFound, s.Message())
		}
		return fmt.Errorf("node %s (%s): %s: %w", node.ID, node.Addr, method, err)
	}
	if ret == nil && requireRet {
		return fmt.Errorf("node %s (%s): %s (request %s): %w", node.ID, node.Addr, method, requestID, ErrNoRet)
	}
	if ret.Succeeded() {
		return nil
	}
	return &RetError{NodeID: node.ID, Method: method, RequestID: requestID, Code: ret.GetRetCode(), Msg: ret.GetRetMsg()}
}

func isNotFound(err error) bool { return err != nil && errors.Is(err, core.ErrNotFound) }

// notFoundText recognises the messages Cubelets use for a missing image or
// template.
func notFoundText(msg string) bool {
	m := strings.ToLower(msg)
	for _, s := range []string{"not found", "no such", "not exist"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}
