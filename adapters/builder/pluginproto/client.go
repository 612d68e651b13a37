package pluginproto

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// CancelGrace is how long a cancelled Build waits for the plugin to clean
// up before it abandons the call.
const CancelGrace = 30 * time.Second

// Info is what a plugin says about itself.
type Info struct {
	Name        string
	APIVersions []string
	// Format is the plugin's output format; "" from older plugins.
	Format string
}

// Client talks to a builder plugin (host side). It is safe for concurrent
// use.
type Client struct {
	rpc RootfsBuilderClient
	// Chunks makes API v2 builds send the tree in chunk messages too,
	// instead of through a named pipe (to compare the two).
	Chunks bool
}

// NewClient wraps a generated gRPC client; go-plugin hosts get a *Client
// from Dispense instead.
func NewClient(rpc RootfsBuilderClient) *Client { return &Client{rpc: rpc} }

// PluginInfo asks the plugin for its name and API versions.
func (c *Client) PluginInfo(ctx context.Context) (Info, error) {
	resp, err := c.rpc.PluginInfo(ctx, &PluginInfoRequest{})
	if err != nil {
		return Info{}, fromStatus(err)
	}
	return Info{Name: resp.GetName(), APIVersions: resp.GetApiVersions(), Format: resp.GetFormat()}, nil
}

// Build streams spec.Tree to the plugin, which writes spec.OutPath. Errors
// keep the plugin's error class.
//
// Cancelling ctx does not cut the call: the host asks the plugin to
// cancel and waits (up to CancelGrace) until the plugin has removed its
// temporary output, so that on return nothing is left behind, as the
// ports.RootfsBuilder contract demands. A build that completes while ctx is
// being cancelled counts as cancelled and its image is removed.
func (c *Client) Build(ctx context.Context, apiVersion string, spec ports.BuildSpec) (ports.BuildResult, error) {
	var res ports.BuildResult
	if spec.Tree == nil {
		return res, &core.FieldError{Field: "Tree", Reason: "is nil"}
	}
	id, stream, end, err := c.startBuild(ctx)
	if err != nil {
		return res, err
	}
	defer end()
	head := specMessage(apiVersion, id, spec)
	if apiVersion != APIVersion1 && !c.Chunks {
		return c.buildFIFO(ctx, stream, head, spec)
	}
	if err := c.sendTree(ctx, stream, head, spec.Tree); err != nil {
		// The tree broke on our side: abandon the build, wait for the
		// plugin to clean up.
		abortErr := c.cancelAndWait(ctx, id, stream, spec.OutPath)
		return res, errors.Join(err, abortErr)
	}
	resp, err := stream.CloseAndRecv()
	return buildAnswer(ctx, resp, err, spec.OutPath)
}

// specMessage is the wire form of spec (without the tree).
func specMessage(apiVersion, id string, spec ports.BuildSpec) *BuildSpec {
	head := &BuildSpec{
		ApiVersion:     apiVersion,
		BuildId:        id,
		OutPath:        spec.OutPath,
		Uuid:           spec.UUID,
		HeadroomBytes:  spec.HeadroomBytes,
		HeadroomInodes: spec.HeadroomInodes,
		MaxSizeBytes:   spec.MaxSizeBytes,
	}
	if !spec.Time.IsZero() {
		head.Time = timestamppb.New(spec.Time)
	}
	return head
}

// startBuild opens a Build call with a fresh build id that outlives
// ctx: when ctx ends first, the plugin is asked to cancel (cancelOnDone)
// and the call is cut only if it does not end within CancelGrace. end
// must be called when the call is over.
func (c *Client) startBuild(ctx context.Context) (id string, stream RootfsBuilder_BuildClient, end func(), err error) {
	if err := ctx.Err(); err != nil {
		return "", nil, nil, fmt.Errorf("build: %w", err)
	}
	var idb [16]byte
	_, _ = rand.Read(idb[:])
	id = hex.EncodeToString(idb[:])
	callCtx, abort := context.WithCancel(context.WithoutCancel(ctx))
	stream, err = c.rpc.Build(callCtx)
	if err != nil {
		abort()
		return "", nil, nil, c.fail(ctx, err)
	}
	finished := make(chan struct{})
	go c.cancelOnDone(ctx, id, finished, abort)
	return id, stream, func() { close(finished); abort() }, nil
}

// buildFIFO hands the tree over through a named pipe beside the output
// (host and plugin share the file system): the spec names it, the host
// writes the tar bytes into it while the plugin reads, and the call ends
// with the plugin's answer.
func (c *Client) buildFIFO(ctx context.Context, stream RootfsBuilder_BuildClient, head *BuildSpec, spec ports.BuildSpec) (ports.BuildResult, error) {
	var res ports.BuildResult
	fifo := filepath.Join(filepath.Dir(spec.OutPath), ".tree-"+head.BuildId+".fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		return res, fmt.Errorf("build: tree pipe: %w", err)
	}
	defer os.Remove(fifo)
	head.TreeFifo = fifo
	if err := stream.Send(&BuildRequest{Msg: &BuildRequest_Spec{Spec: head}}); err != nil {
		_, rerr := stream.CloseAndRecv()
		return res, c.fail(ctx, errors.Join(err, rerr))
	}
	treeErr := make(chan error, 1)
	opened := make(chan struct{})
	go func() { treeErr <- feedFIFO(ctx, fifo, spec.Tree, opened) }()
	resp, err := stream.CloseAndRecv()
	releaseFeeder(fifo, opened)
	terr := <-treeErr
	if terr != nil {
		if err == nil {
			_ = os.Remove(spec.OutPath) // built from a tree we could not read in full
		}
		return res, errors.Join(terr, fromStatus(err))
	}
	return buildAnswer(ctx, resp, err, spec.OutPath)
}

// buildAnswer turns the plugin's answer into the result: a canceled
// build fails (its image, if the plugin finished it anyway, removed).
func buildAnswer(ctx context.Context, resp *BuildResponse, err error, out string) (ports.BuildResult, error) {
	if ctx.Err() != nil {
		if err == nil {
			_ = os.Remove(out)
		}
		return ports.BuildResult{}, fmt.Errorf("build: %w", ctx.Err())
	}
	if err != nil {
		return ports.BuildResult{}, fromStatus(err)
	}
	sum := resp.GetSha256()
	if sum != "" && !core.IsSHA256Hex(sum) {
		_ = os.Remove(out)
		return ports.BuildResult{}, fmt.Errorf("build: the plugin answered with sha256 %q, not 64 lowercase hex digits", sum)
	}
	return ports.BuildResult{SizeBytes: resp.GetSizeBytes(), SHA256: sum}, nil
}

// treeReadError marks a failure to read the tree (not to write the pipe).
type treeReadError struct{ err error }

func (e *treeReadError) Error() string { return "read tree: " + e.err.Error() }
func (e *treeReadError) Unwrap() error { return e.err }

type treeReader struct{ r io.Reader }

func (t treeReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err != nil && err != io.EOF {
		err = &treeReadError{err}
	}
	return n, err
}

// releaseFeeder lets feedFIFO past its open once the plugin has answered.
// A plugin that answered without opening the pipe leaves the feeder in, or
// still on its way to, a blocking open (a goroutine may run late), so a
// reader opened and closed at once can miss it. Holding a reader until the
// feeder says it is past open frees it whenever it gets there; dropping the
// reader then makes its writes fail (EPIPE) rather than fill a pipe nobody
// reads. The reader must not exist before the answer: the feeder could then
// write a small tree and close before the plugin opens, and the plugin's
// open would wait for a writer forever.
func releaseFeeder(fifo string, opened <-chan struct{}) {
	for {
		if r, err := os.OpenFile(fifo, os.O_RDONLY|unix.O_NONBLOCK, 0); err == nil {
			if testHookReaderHeld != nil {
				testHookReaderHeld()
			}
			<-opened
			r.Close()
			return
		}
		// Out of descriptors, say: retry until the feeder is past open.
		select {
		case <-opened:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Test hooks: run while releaseFeeder holds its reader, and before the
// feeder opens the pipe.
var testHookReaderHeld, testHookBeforeOpen func()

// feedFIFO copies the tree into the pipe, closing opened once its open has
// returned. Only a failure to read the tree is returned: a plugin that stops
// reading (EPIPE) says why in its answer. Cancellation closes the pipe, so a
// plugin blocked reading it returns.
func feedFIFO(ctx context.Context, fifo string, tree io.Reader, opened chan<- struct{}) error {
	if testHookBeforeOpen != nil {
		testHookBeforeOpen()
	}
	f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	close(opened)
	if err != nil {
		return nil
	}
	stop := context.AfterFunc(ctx, func() { f.Close() })
	defer stop()
	defer f.Close()
	buf := make([]byte, ChunkSize)
	_, err = io.CopyBuffer(struct{ io.Writer }{f}, treeReader{tree}, buf)
	var te *treeReadError
	if errors.As(err, &te) {
		return te
	}
	return nil
}

// sendTree sends the spec and then the tree. It returns only errors of the
// tree itself; when the plugin ends the call early (Send returns io.EOF)
// it stops quietly and CloseAndRecv tells why.
func (c *Client) sendTree(ctx context.Context, stream RootfsBuilder_BuildClient, head *BuildSpec, tree io.Reader) error {
	if err := stream.Send(&BuildRequest{Msg: &BuildRequest_Spec{Spec: head}}); err != nil {
		return nil
	}
	// The buffer is reused: Send marshals the message before returning.
	buf := make([]byte, ChunkSize)
	msg := &BuildRequest_Chunk{}
	req := &BuildRequest{Msg: msg}
	for ctx.Err() == nil {
		n, rerr := io.ReadFull(tree, buf)
		if n > 0 {
			msg.Chunk = buf[:n]
			if err := stream.Send(req); err != nil {
				return nil
			}
		}
		switch rerr {
		case nil:
		case io.EOF, io.ErrUnexpectedEOF:
			return nil
		default:
			return fmt.Errorf("read tree: %w", rerr)
		}
	}
	return nil // cancelled; cancelOnDone has told the plugin
}

// cancelOnDone asks the plugin to cancel build id when ctx ends before the
// call finishes, and cuts the call if the plugin does not finish within
// CancelGrace.
func (c *Client) cancelOnDone(ctx context.Context, id string, finished <-chan struct{}, abort context.CancelFunc) {
	select {
	case <-finished:
		return
	case <-ctx.Done():
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CancelGrace)
	defer cancel()
	if _, err := c.rpc.Cancel(cctx, &CancelRequest{BuildId: id}); err != nil {
		abort()
		return
	}
	select {
	case <-finished:
	case <-cctx.Done():
		abort()
	}
}

// cancelAndWait cancels build id and waits for the call to end. Should the
// plugin have finished the build all the same, its image is removed.
func (c *Client) cancelAndWait(ctx context.Context, id string, stream RootfsBuilder_BuildClient, outPath string) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CancelGrace)
	defer cancel()
	if _, err := c.rpc.Cancel(cctx, &CancelRequest{BuildId: id}); err != nil {
		return fmt.Errorf("cancel plugin build: %w", fromStatus(err))
	}
	done := make(chan struct{})
	go func() {
		if _, err := stream.CloseAndRecv(); err == nil {
			_ = os.Remove(outPath)
		}
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-cctx.Done():
		return errors.New("plugin did not end the cancelled build in time")
	}
}

// fail prefers the caller's own cancellation over the status it caused.
func (c *Client) fail(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("build: %w", ctxErr)
	}
	return fromStatus(err)
}
