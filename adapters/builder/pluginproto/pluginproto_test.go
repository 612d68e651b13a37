package pluginproto

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc/codes"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// fakeBuilder is a tar-reading plugin builder (TarBuilder) that records
// what reaches the plugin side.
type fakeBuilder struct {
	// build runs in place of a real build; nil reads the whole tree.
	build func(ctx context.Context, spec ports.BuildSpec, tree io.Reader) (ports.BuildResult, error)

	mu      sync.Mutex
	spec    ports.BuildSpec
	treeSHA [32]byte
	treeLen int64
}

func (f *fakeBuilder) Name() string   { return "fake" }
func (f *fakeBuilder) Format() string { return "fake/1" }

func (f *fakeBuilder) BuildTar(ctx context.Context, spec ports.BuildSpec, tree io.Reader) (ports.BuildResult, error) {
	if f.build != nil {
		return f.build(ctx, spec, tree)
	}
	h := sha256.New()
	n, err := io.Copy(h, tree)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.spec, f.treeLen = spec, n
	copy(f.treeSHA[:], h.Sum(nil))
	return ports.BuildResult{SizeBytes: 42 << 20}, err
}

// connect serves impl in process over real gRPC, the way Nomad's driver
// harness does, and returns the host-side client.
func connect(t *testing.T, p *GRPCPlugin) *Client {
	t.Helper()
	client, _ := plugin.TestPluginGRPCConn(t, false, map[string]plugin.Plugin{PluginName: p})
	// Close also stops the server (through go-plugin's controller);
	// stopping it here as well races inside go-plugin.
	t.Cleanup(func() { client.Close() })
	raw, err := client.Dispense(PluginName)
	if err != nil {
		t.Fatal(err)
	}
	return raw.(*Client)
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{1})
	_, _ = r.Read(b)
	return b
}

// randomTree is a tree of one file of n random bytes, held in a file of
// its own, and the tar stream WriteTar makes of it.
func randomTree(t *testing.T, n int) (ports.TreeSlice, []byte) {
	t.Helper()
	content := randomBytes(n)
	f := unlinkedFile(t, content)
	tree := ports.TreeSlice{
		{Header: &tar.Header{Typeflag: tar.TypeDir, Name: "d/", Mode: 0o755, ModTime: time.Unix(1e9, 0)}},
		{Header: &tar.Header{Typeflag: tar.TypeReg, Name: "d/f", Mode: 0o644, Size: int64(n), ModTime: time.Unix(1e9, 0)}, File: f},
	}
	var b bytes.Buffer
	if err := WriteTar(context.Background(), &b, tree); err != nil {
		t.Fatal(err)
	}
	return tree, b.Bytes()
}

func TestPluginInfo(t *testing.T) {
	info, err := connect(t, &GRPCPlugin{Tar: &fakeBuilder{}}).PluginInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// A builder that reads only tar is offered with the tar version only.
	if info.Name != "fake" || fmt.Sprint(info.APIVersions) != "[v1]" {
		t.Errorf("info = %+v", info)
	}
	info, err = connect(t, &GRPCPlugin{Impl: &plannedFake{}}).PluginInfo(context.Background())
	if err != nil || fmt.Sprint(info.APIVersions) != "[v3]" {
		t.Errorf("entries builder: info = %+v, err %v", info, err)
	}
}

func TestSpecAndTreeCrossTheWire(t *testing.T) {
	fb := &fakeBuilder{}
	c := connect(t, &GRPCPlugin{Tar: fb})
	entries, tree := randomTree(t, 5*ChunkSize/2+123) // three chunks, the last partial
	when := time.Date(2025, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))
	spec := ports.BuildSpec{
		OutPath: "/data/a.ext4", UUID: "6f1c2a8e-3d4b-4c5d-9e6f-0a1b2c3d4e5f",
		Time: when, HeadroomBytes: 7, HeadroomInodes: 8, MaxSizeBytes: 9,
	}
	res, err := c.Build(context.Background(), APIVersionTar, spec, entries)
	if err != nil {
		t.Fatal(err)
	}
	if res.SizeBytes != 42<<20 {
		t.Errorf("SizeBytes = %d", res.SizeBytes)
	}
	got := fb.spec
	if got.OutPath != spec.OutPath || got.UUID != spec.UUID || !got.Time.Equal(when) ||
		got.HeadroomBytes != 7 || got.HeadroomInodes != 8 || got.MaxSizeBytes != 9 {
		t.Errorf("spec arrived as %+v", got)
	}
	if fb.treeLen != int64(len(tree)) || fb.treeSHA != sha256.Sum256(tree) {
		t.Errorf("tree arrived as %d bytes, sha %x; sent %d", fb.treeLen, fb.treeSHA, len(tree))
	}

	// The zero time stays zero, and an empty tree is a tree (the
	// end-of-archive marker).
	if _, err := c.Build(context.Background(), APIVersionTar, ports.BuildSpec{}, ports.TreeSlice(nil)); err != nil {
		t.Fatal(err)
	}
	if !fb.spec.Time.IsZero() || fb.treeLen != 1024 {
		t.Errorf("zero spec arrived with time %v and %d tree bytes", fb.spec.Time, fb.treeLen)
	}
}

func TestErrorClassesCrossTheWire(t *testing.T) {
	tests := []struct {
		class error
		code  codes.Code
	}{
		{core.ErrInvalidArgument, codes.InvalidArgument},
		{core.ErrUnsupported, codes.Unimplemented},
		{core.ErrNotFound, codes.NotFound},
		{core.ErrBusy, codes.ResourceExhausted},
		{&core.FieldError{Field: "UUID", Reason: "bad"}, codes.InvalidArgument},
		{errors.New("disk on fire"), codes.Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.code.String(), func(t *testing.T) {
			perr := fmt.Errorf("entry %q: %w", "etc/x", tt.class)
			c := connect(t, &GRPCPlugin{Tar: &fakeBuilder{build: func(context.Context, ports.BuildSpec, io.Reader) (ports.BuildResult, error) {
				return ports.BuildResult{}, perr
			}}})
			// A large tree the plugin never reads: the host must still get
			// the plugin's error, not a broken pipe.
			entries, _ := randomTree(t, 8*ChunkSize)
			_, err := c.Build(context.Background(), APIVersionTar, ports.BuildSpec{}, entries)
			var re *RemoteError
			if !errors.As(err, &re) || re.Code != tt.code {
				t.Fatalf("err = %v (%T), want a RemoteError with code %v", err, err, tt.code)
			}
			if err.Error() != perr.Error() {
				t.Errorf("message %q, want the plugin's %q", err, perr)
			}
			if tt.code != codes.Unknown && !errors.Is(err, errors.Unwrap(perr)) && !errors.Is(err, core.ErrInvalidArgument) {
				t.Errorf("errors.Is(err, %v) is false", tt.class)
			}
			if tt.code == codes.Unknown && errors.Unwrap(err) != nil {
				t.Errorf("unclassed error unwraps to %v", errors.Unwrap(err))
			}
		})
	}
}

func TestUnknownAPIVersion(t *testing.T) {
	c := connect(t, &GRPCPlugin{Tar: &fakeBuilder{}})
	for _, v := range []string{"v0", "v2"} {
		_, err := c.Build(context.Background(), v, ports.BuildSpec{}, ports.TreeSlice(nil))
		if !errors.Is(err, core.ErrUnsupported) || !strings.Contains(err.Error(), `"`+v+`"`) {
			t.Fatalf("err = %v, want ErrUnsupported naming %s", err, v)
		}
	}
}

// slowCleanup is a build that reads a little, blocks until cancelled and
// then takes a while to clean up, recording when it is done.
type slowCleanup struct {
	started chan struct{}
	cleaned atomic.Bool
}

func (s *slowCleanup) build(ctx context.Context, spec ports.BuildSpec, tree io.Reader) (ports.BuildResult, error) {
	buf := make([]byte, 1024)
	if _, err := io.ReadFull(tree, buf); err != nil {
		return ports.BuildResult{}, err
	}
	close(s.started)
	<-ctx.Done()
	time.Sleep(200 * time.Millisecond) // removing a big temporary file
	s.cleaned.Store(true)
	return ports.BuildResult{}, ctx.Err()
}

func TestCancelWaitsForPluginCleanup(t *testing.T) {
	s := &slowCleanup{started: make(chan struct{})}
	c := connect(t, &GRPCPlugin{Tar: &fakeBuilder{build: s.build}})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-s.started
		cancel()
	}()
	entries, _ := randomTree(t, 64*ChunkSize) // more than the plugin reads before it is cancelled
	_, err := c.Build(ctx, APIVersionTar, ports.BuildSpec{}, entries)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if !s.cleaned.Load() {
		t.Fatal("Build returned before the plugin finished cleaning up")
	}
}

// A tree whose content cannot be read in full (a spool cut short) fails
// the build with that cause, once the plugin has cleaned up.
func TestTreeErrorCancelsPluginBuild(t *testing.T) {
	s := &slowCleanup{started: make(chan struct{})}
	c := connect(t, &GRPCPlugin{Tar: &fakeBuilder{build: s.build}})
	entries, _ := randomTree(t, 3*ChunkSize/2)
	entries[1].Header.Size = 3 * ChunkSize // more than the file holds
	_, err := c.Build(context.Background(), APIVersionTar, ports.BuildSpec{}, entries)
	if err == nil || !strings.Contains(err.Error(), "write tree") || !strings.Contains(err.Error(), `"d/f"`) {
		t.Fatalf("err = %v, want the tree's error", err)
	}
	if !s.cleaned.Load() {
		t.Fatal("Build returned before the plugin finished cleaning up")
	}
}

func TestCanceledBeforeStartSendsNothing(t *testing.T) {
	called := false
	c := connect(t, &GRPCPlugin{Tar: &fakeBuilder{build: func(context.Context, ports.BuildSpec, io.Reader) (ports.BuildResult, error) {
		called = true
		return ports.BuildResult{}, nil
	}}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Build(ctx, APIVersionTar, ports.BuildSpec{}, ports.TreeSlice(nil)); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if called {
		t.Error("the plugin was asked to build")
	}
}
