package pluginproto

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

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

// Build hands tree to the plugin, which writes spec.OutPath, and returns
// its answer. With APIVersionEntries the tree crosses as entries whose
// content the plugin reads in place (entries.go); with APIVersionTar as a
// tar stream in chunk messages, encoded here from the entries. Errors keep
// the plugin's error class.
//
// Cancelling ctx does not cut the call: the host asks the plugin to
// cancel and waits (up to CancelGrace) until the plugin has removed its
// temporary output, so that on return nothing is left behind, as the
// ports.RootfsBuilder contract demands. A build that completes while ctx is
// being cancelled counts as cancelled and its image is removed.
func (c *Client) Build(ctx context.Context, apiVersion string, spec ports.BuildSpec, tree ports.Tree) (ports.BuildResult, error) {
	var res ports.BuildResult
	if apiVersion != APIVersionEntries && apiVersion != APIVersionTar {
		return res, fmt.Errorf("build: API version %q is not one the host speaks (%v): %w", apiVersion, APIVersions, core.ErrUnsupported)
	}
	id, stream, end, err := c.startBuild(ctx)
	if err != nil {
		return res, err
	}
	defer end()
	head := specMessage(apiVersion, id, spec)
	if apiVersion == APIVersionEntries {
		head.Entries = true
		head.EntryCount = int64(tree.Len())
		err = sendEntries(ctx, stream, head, tree)
	} else {
		err = c.sendTar(ctx, stream, head, tree)
	}
	if err != nil {
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

// sendTar sends the spec and then the tree as a tar stream, written from
// the entries as it is sent.
func (c *Client) sendTar(ctx context.Context, stream RootfsBuilder_BuildClient, head *BuildSpec, tree ports.Tree) error {
	pr, pw := io.Pipe()
	written := make(chan error, 1)
	go func() {
		err := WriteTar(ctx, pw, tree)
		pw.CloseWithError(err)
		written <- err
	}()
	err := c.sendTree(ctx, stream, head, pr)
	pr.CloseWithError(errSendEnded) // a writer still writing stops
	werr := <-written
	switch {
	case err != nil: // WriteTar's own failure, read from the pipe
		return fmt.Errorf("write tree: %w", err)
	case werr != nil && !errors.Is(werr, errSendEnded):
		return fmt.Errorf("write tree: %w", werr)
	}
	return nil
}

// errSendEnded stops WriteTar once the stream is no longer read.
var errSendEnded = errors.New("the tree is no longer sent")

// WriteTar writes tree as the tar stream a tar-reading plugin gets: each
// entry's header, a regular file's content read from its File at Offset,
// and the end-of-archive marker.
func WriteTar(ctx context.Context, w io.Writer, tree ports.Tree) error {
	tw := tar.NewWriter(w)
	buf := make([]byte, ChunkSize)
	for i := range tree.Len() {
		if i%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		e, err := tree.Entry(i)
		if err != nil {
			return fmt.Errorf("read tree entry %d: %w", i, err)
		}
		if e.Header == nil {
			return fmt.Errorf("tree entry %d has no header: %w", i, core.ErrInvalidArgument)
		}
		h := *e.Header
		if err := tw.WriteHeader(&h); err != nil {
			return fmt.Errorf("tree entry %q: %w", h.Name, err)
		}
		if h.Typeflag != tar.TypeReg || h.Size == 0 {
			continue
		}
		if e.File == nil {
			return fmt.Errorf("tree entry %q: %d bytes of content and no file: %w", h.Name, h.Size, core.ErrInvalidArgument)
		}
		n, err := io.CopyBuffer(tw, io.NewSectionReader(e.File, e.Offset, h.Size), buf)
		if err == nil && n != h.Size {
			err = fmt.Errorf("%d of %d bytes: %w", n, h.Size, io.ErrUnexpectedEOF)
		}
		if err != nil {
			return fmt.Errorf("tree entry %q: content: %w", h.Name, err)
		}
	}
	return tw.Close()
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
			return rerr
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
