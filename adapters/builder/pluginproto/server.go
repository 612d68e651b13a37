package pluginproto

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cubesandbox/templatecenter/ports"
)

// server serves a builder in the plugin process: impl from entries, or tar
// from a tar stream.
type server struct {
	UnimplementedRootfsBuilderServer
	impl         ports.RootfsBuilder
	tar          TarBuilder
	versions     []string
	name, format string

	mu      sync.Mutex
	running map[string]context.CancelFunc // build id -> cancel
}

func (s *server) PluginInfo(context.Context, *PluginInfoRequest) (*PluginInfoResponse, error) {
	return &PluginInfoResponse{Name: s.name, ApiVersions: s.versions, Format: s.format}, nil
}

func (s *server) Cancel(_ context.Context, req *CancelRequest) (*CancelResponse, error) {
	s.mu.Lock()
	cancel := s.running[req.GetBuildId()]
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	return &CancelResponse{}, nil
}

// track registers a running build under id so that Cancel can reach it.
func (s *server) track(id string, cancel context.CancelFunc) (untrack func(), err error) {
	if id == "" {
		return func() {}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.running[id]; dup {
		return nil, status.Errorf(codes.InvalidArgument, "build id %q is already running: invalid argument", id)
	}
	if s.running == nil {
		s.running = make(map[string]context.CancelFunc)
	}
	s.running[id] = cancel
	return func() {
		s.mu.Lock()
		delete(s.running, id)
		s.mu.Unlock()
	}, nil
}

func (s *server) Build(stream RootfsBuilder_BuildServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	spec := first.GetSpec()
	if spec == nil {
		return status.Error(codes.InvalidArgument, "build stream: the first message must carry the spec: invalid argument")
	}
	if !slices.Contains(s.versions, spec.GetApiVersion()) {
		return status.Errorf(codes.Unimplemented, "API version %q is not one this plugin speaks (%v): unsupported",
			spec.GetApiVersion(), s.versions)
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	untrack, err := s.track(spec.GetBuildId(), cancel)
	if err != nil {
		return err
	}
	defer untrack()

	var when time.Time
	if spec.GetTime() != nil {
		when = spec.GetTime().AsTime()
	}
	bspec := ports.BuildSpec{
		OutPath:        spec.GetOutPath(),
		UUID:           spec.GetUuid(),
		Time:           when,
		HeadroomBytes:  spec.GetHeadroomBytes(),
		HeadroomInodes: spec.GetHeadroomInodes(),
		MaxSizeBytes:   spec.GetMaxSizeBytes(),
	}
	switch {
	case spec.GetTreeFifo() != "":
		return status.Error(codes.InvalidArgument, "tree_fifo (API v2, a tar stream through a named pipe) is not served: invalid argument")
	case spec.GetEntries():
		return s.buildEntries(ctx, stream, spec.GetApiVersion(), spec.GetEntryCount(), bspec)
	case spec.GetApiVersion() != APIVersionTar || s.tar == nil:
		return status.Errorf(codes.InvalidArgument, "a build without entries needs API %s and a tar builder (%s, API %s): invalid argument", APIVersionTar, s.name, spec.GetApiVersion())
	}
	res, err := s.tar.BuildTar(ctx, bspec, &chunkReader{stream: stream})
	if err != nil {
		return buildStatus(ctx, err)
	}
	return stream.SendAndClose(&BuildResponse{SizeBytes: res.SizeBytes, Sha256: res.SHA256})
}

// buildEntries serves an APIVersionEntries build.
func (s *server) buildEntries(ctx context.Context, stream RootfsBuilder_BuildServer, version string, count int64, spec ports.BuildSpec) error {
	if version != APIVersionEntries || s.impl == nil {
		return status.Errorf(codes.InvalidArgument, "a build from entries needs API %s and a builder that builds from entries (%s, API %s): invalid argument", APIVersionEntries, s.name, version)
	}
	entries, closeAll, err := receiveEntries(ctx, stream, count)
	if err != nil {
		return err
	}
	defer closeAll()
	res, err := s.impl.Build(ctx, spec, ports.TreeSlice(entries))
	if err != nil {
		return buildStatus(ctx, err)
	}
	return stream.SendAndClose(&BuildResponse{SizeBytes: res.SizeBytes, Sha256: res.SHA256})
}

// buildStatus reports cancellation as such even if the builder saw it only
// as a broken stream.
func buildStatus(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		err = fmt.Errorf("%w (%w)", ctxErr, err)
	}
	return toStatus(err)
}

// chunkReader reads the tree out of the Build stream.
type chunkReader struct {
	stream RootfsBuilder_BuildServer
	cur    []byte
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		msg, err := r.stream.Recv()
		if err != nil {
			if err == io.EOF {
				return 0, io.EOF
			}
			return 0, fromStatus(err)
		}
		chunk, ok := msg.GetMsg().(*BuildRequest_Chunk)
		if !ok {
			return 0, errors.New("build stream: the spec was sent twice")
		}
		r.cur = chunk.Chunk
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}
