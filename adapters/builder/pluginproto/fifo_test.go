package pluginproto

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// transports runs f over API v2's named pipe and over chunk messages.
func transports(t *testing.T, f func(t *testing.T, chunks bool)) {
	for _, chunks := range []bool{false, true} {
		name := "fifo"
		if chunks {
			name = "chunks"
		}
		t.Run(name, func(t *testing.T) { f(t, chunks) })
	}
}

func noPipesLeft(t *testing.T, dir string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".fifo") {
			t.Errorf("tree pipe %s left behind", e.Name())
		}
	}
}

func TestV2TreeCrossesTheBoundary(t *testing.T) {
	transports(t, func(t *testing.T, chunks bool) {
		fb := &fakeBuilder{}
		c := connect(t, &GRPCPlugin{Impl: fb})
		c.Chunks = chunks
		dir := t.TempDir()
		tree := randomTree(5*ChunkSize/2 + 123)
		res, err := c.Build(context.Background(), APIVersion2, ports.BuildSpec{Tree: bytes.NewReader(tree), OutPath: filepath.Join(dir, "a.ext4"), UUID: "u"})
		if err != nil {
			t.Fatal(err)
		}
		if res.SizeBytes != 42<<20 || fb.spec.UUID != "u" {
			t.Errorf("result %+v, spec %+v", res, fb.spec)
		}
		if fb.treeLen != int64(len(tree)) || fb.treeSHA != sha256.Sum256(tree) {
			t.Errorf("tree arrived as %d bytes; sent %d", fb.treeLen, len(tree))
		}
		_, isFile := fb.spec.Tree.(*os.File)
		if isFile == chunks {
			t.Errorf("chunks %v, but the plugin read the tree from %T", chunks, fb.spec.Tree)
		}
		noPipesLeft(t, dir)
	})
}

func TestV2PluginErrorWithoutReading(t *testing.T) {
	transports(t, func(t *testing.T, chunks bool) {
		c := connect(t, &GRPCPlugin{Impl: &fakeBuilder{build: func(context.Context, ports.BuildSpec) (ports.BuildResult, error) {
			return ports.BuildResult{}, errors.New("nope: " + core.ErrInvalidArgument.Error())
		}}})
		c.Chunks = chunks
		dir := t.TempDir()
		_, err := c.Build(context.Background(), APIVersion2, ports.BuildSpec{Tree: bytes.NewReader(randomTree(8 * ChunkSize)), OutPath: filepath.Join(dir, "a.ext4")})
		var re *RemoteError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), "nope") {
			t.Fatalf("err = %v, want the plugin's error", err)
		}
		noPipesLeft(t, dir)
	})
}

func TestV2TreeErrorReachesTheHost(t *testing.T) {
	transports(t, func(t *testing.T, chunks bool) {
		s := &slowCleanup{started: make(chan struct{})}
		c := connect(t, &GRPCPlugin{Impl: &fakeBuilder{build: func(ctx context.Context, spec ports.BuildSpec) (ports.BuildResult, error) {
			if !chunks {
				// Through the pipe the plugin sees the tree end early.
				_, err := io.Copy(io.Discard, spec.Tree)
				s.cleaned.Store(true)
				return ports.BuildResult{}, errors.Join(err, errors.New("tree ended early"))
			}
			return s.build(ctx, spec)
		}}})
		c.Chunks = chunks
		dir := t.TempDir()
		_, err := c.Build(context.Background(), APIVersion2, ports.BuildSpec{Tree: &failingReader{n: 3 * ChunkSize / 2}, OutPath: filepath.Join(dir, "a.ext4")})
		if err == nil || !strings.Contains(err.Error(), "layer blob corrupt") {
			t.Fatalf("err = %v, want the tree's error", err)
		}
		if !s.cleaned.Load() {
			t.Fatal("Build returned before the plugin finished")
		}
		noPipesLeft(t, dir)
	})
}

func TestV2CancelEndsAPluginReadingThePipe(t *testing.T) {
	s := &slowCleanup{started: make(chan struct{})}
	c := connect(t, &GRPCPlugin{Impl: &fakeBuilder{build: s.build}})
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	go func() {
		_, _ = pw.Write(randomTree(4096))
		<-s.started
		cancel()
		<-ctx.Done()
		pw.Close()
	}()
	dir := t.TempDir()
	_, err := c.Build(ctx, APIVersion2, ports.BuildSpec{Tree: pr, OutPath: filepath.Join(dir, "a.ext4")})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if !s.cleaned.Load() {
		t.Fatal("Build returned before the plugin finished cleaning up")
	}
	noPipesLeft(t, dir)
}

func TestV1RefusesAPipe(t *testing.T) {
	c := connect(t, &GRPCPlugin{Impl: &fakeBuilder{}})
	stream, err := c.rpc.Build(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&BuildRequest{Msg: &BuildRequest_Spec{Spec: &BuildSpec{ApiVersion: APIVersion1, TreeFifo: "/etc/passwd"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.CloseAndRecv(); !errors.Is(fromStatus(err), core.ErrInvalidArgument) {
		t.Fatalf("err = %v, want invalid argument", err)
	}
	stream, _ = c.rpc.Build(context.Background())
	stream.Send(&BuildRequest{Msg: &BuildRequest_Spec{Spec: &BuildSpec{ApiVersion: APIVersion2, TreeFifo: "/etc/passwd"}}})
	if _, err := stream.CloseAndRecv(); !errors.Is(fromStatus(err), core.ErrInvalidArgument) {
		t.Fatalf("a regular file as the tree pipe: err = %v, want invalid argument", err)
	}
}

// The plugin answers before the host's feeder has got to opening the pipe
// (the hooks order it so): the build must end all the same, and the feeder
// with it. Before the fix the feeder sat in open for good, and Build with it.
func TestV2AnswerBeforeTheFeederOpensThePipe(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cancel bool // ctx ends while the feeder is still late
		want   error
	}{
		{"refused", false, core.ErrUnsupported},
		{"refused, then cancelled", true, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			held := make(chan struct{})
			testHookReaderHeld = func() { close(held) }
			testHookBeforeOpen = func() {
				<-held
				if tc.cancel {
					cancel()
				}
			}
			t.Cleanup(func() { testHookReaderHeld, testHookBeforeOpen = nil, nil })
			c := connect(t, &GRPCPlugin{Impl: &fakeBuilder{}, APIVersions: []string{APIVersion1}})
			dir := t.TempDir()
			done := make(chan error, 1)
			go func() {
				_, err := c.Build(ctx, APIVersion2, ports.BuildSpec{Tree: bytes.NewReader(randomTree(8 * ChunkSize)), OutPath: filepath.Join(dir, "a.ext4")})
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, tc.want) {
					t.Fatalf("err = %v, want %v", err, tc.want)
				}
			case <-time.After(20 * time.Second): // a hang guard, not a timing check
				t.Fatal("Build hangs: the feeder never got past opening the pipe")
			}
			noPipesLeft(t, dir)
		})
	}
}
