package plugin

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	goplugin "github.com/hashicorp/go-plugin"

	"github.com/cubesandbox/templatecenter/adapters/builder/pluginproto"
	"github.com/cubesandbox/templatecenter/adapters/layers"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/plugins/ext4stream/ext4build"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/buildertest"
	"github.com/cubesandbox/templatecenter/ports/flattenertest"
)

// pluginBin is the ext4stream plugin, built once by TestMain.
var pluginBin string

// helperEnv makes the test binary serve a plugin itself (go-plugin's own
// helper-process trick), for cases the real plugin cannot show.
const helperEnv = "CUBE_BUILDER_PLUGIN_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode == "host" {
		hostHelper()
		return
	} else if mode != "" {
		serveHelper(mode)
		return
	}
	dir, err := os.MkdirTemp("", "ext4stream-plugin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if gobin, err := exec.LookPath("go"); err == nil {
		pluginBin = filepath.Join(dir, "ext4stream")
		cmd := exec.Command(gobin, "build", "-o", pluginBin, "github.com/cubesandbox/templatecenter/plugins/ext4stream")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build plugins/ext4stream: %v\n%s", err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// nameOnly is a builder that only has a name.
type nameOnly struct{}

func (nameOnly) Name() string   { return "helper" }
func (nameOnly) Format() string { return "helper/1" }
func (nameOnly) Build(context.Context, ports.BuildSpec) (ports.BuildResult, error) {
	return ports.BuildResult{}, errors.New("not a real builder")
}

// hangs is a plugin that opens its temporary image beside spec.OutPath,
// as ext4stream does, and then never finishes, cancelled or not: only a
// kill ends it.
type hangs struct{ nameOnly }

func (hangs) Build(_ context.Context, spec ports.BuildSpec) (ports.BuildResult, error) {
	tmp, err := os.CreateTemp(filepath.Dir(spec.OutPath), "."+filepath.Base(spec.OutPath)+".tmp-*")
	if err != nil {
		return ports.BuildResult{}, err
	}
	if _, err := tmp.Write(make([]byte, 1<<20)); err != nil {
		return ports.BuildResult{}, err
	}
	select {}
}

func (h hangs) BuildEntries(ctx context.Context, spec ports.BuildSpec, _ []ports.TreeEntry) (ports.BuildResult, error) {
	return h.Build(ctx, spec)
}

func serveHelper(mode string) {
	p := &pluginproto.GRPCPlugin{Impl: nameOnly{}}
	switch mode {
	case "future-api":
		p.APIVersions = []string{"v99"}
	case "hang":
		p.Impl = hangs{}
	}
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: pluginproto.Handshake,
		Plugins:         goplugin.PluginSet{pluginproto.PluginName: p},
		GRPCServer:      goplugin.DefaultGRPCServer,
	})
}

func load(t *testing.T) *Builder {
	t.Helper()
	if pluginBin == "" {
		t.Skip("no go toolchain to build the plugin")
	}
	b, err := Load(context.Background(), pluginBin, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// The shared fidelity suite through the real plugin binary: the same
// checks as in-process (plugins/ext4stream/ext4build), across go-plugin.
func TestConformance(t *testing.T) {
	b := load(t)
	buildertest.RunConformanceTests(t, func(context.Context, *testing.T) (buildertest.Harness, error) {
		return harness{b}, nil
	})
}

// harness shares one plugin process: the suite's builds are sequential.
// The builder builds from tar streams and, through the plugin's API v3,
// from entries: the suite holds the second to the bytes of the first.
type harness struct{ b *Builder }

// plannedPlugin is a plugin builder that also builds from entries, as the
// data plane wires it.
type plannedPlugin struct {
	*Builder
	ports.PlannedBuilder
}

func (h harness) MakeBuilder(context.Context) (ports.RootfsBuilder, error) {
	pb := h.b.Planned()
	if pb == nil {
		return nil, errors.New("the ext4stream plugin does not build from entries")
	}
	return plannedPlugin{h.b, pb}, nil
}

func (harness) MakeFlattener(context.Context) (ports.TreeFlattener, error) {
	return layers.Flattener{}, nil
}

func (harness) MakeLimitedFlattener(_ context.Context, l flattenertest.Limits) (ports.TreeFlattener, error) {
	return layers.Flattener{Limits: layers.Limits{MaxEntries: l.MaxEntries, MaxTotalBytes: l.MaxTotalBytes,
		MaxFileBytes: l.MaxFileBytes, MaxPathDepth: l.MaxPathDepth, MaxXattrBytes: l.MaxXattrBytes}}, nil
}

func (harness) Capabilities() buildertest.Capabilities {
	return buildertest.Capabilities{Headroom: true, SparseFiles: true}
}

func (harness) Close() {}

func TestLoad(t *testing.T) {
	b := load(t)
	if b.Name() != "ext4stream" || b.APIVersion() != pluginproto.APIVersion3 || b.Planned() == nil {
		t.Errorf("Name %q, API %q", b.Name(), b.APIVersion())
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if !b.Exited() {
		t.Error("the plugin process is still running after Close")
	}
}

func TestLoadChecksum(t *testing.T) {
	if pluginBin == "" {
		t.Skip("no go toolchain to build the plugin")
	}
	bin, err := os.ReadFile(pluginBin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(bin)
	b, err := Load(context.Background(), pluginBin, Options{SHA256: sum[:]})
	if err != nil {
		t.Fatalf("matching checksum: %v", err)
	}
	b.Close()
	sum[0] ^= 1
	if _, err := Load(context.Background(), pluginBin, Options{SHA256: sum[:]}); !errors.Is(err, goplugin.ErrChecksumsDoNotMatch) {
		t.Fatalf("wrong checksum: err = %v, want ErrChecksumsDoNotMatch", err)
	}
}

func TestLoadRefusesForeignAPIVersion(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	_, err = Load(context.Background(), self, Options{Env: []string{helperEnv + "=future-api"}})
	if !errors.Is(err, core.ErrUnsupported) || !strings.Contains(err.Error(), "v99") {
		t.Fatalf("err = %v, want ErrUnsupported naming v99", err)
	}
}

func TestLoadMissingBinary(t *testing.T) {
	if _, err := Load(context.Background(), filepath.Join(t.TempDir(), "nope"), Options{}); err == nil {
		t.Fatal("Load of a missing binary succeeded")
	}
}

func TestErrorClassCrossesProcess(t *testing.T) {
	b := load(t)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/../../escape", Mode: 0o644})
	_ = tw.Close()
	out := filepath.Join(t.TempDir(), "rootfs.ext4")
	_, err := b.Build(context.Background(), ports.BuildSpec{Tree: &buf, OutPath: out, UUID: buildertest.FixtureUUID})
	if !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), `"etc/../../escape"`) {
		t.Fatalf("err = %v, want ErrInvalidArgument naming the entry", err)
	}
}

// The plugin must write exactly what the in-process builder writes.
func TestSameBytesAsInProcess(t *testing.T) {
	b := load(t)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i := range 50 {
		body := bytes.Repeat([]byte{byte(i)}, i*1000)
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("f%02d", i), Mode: 0o644, Size: int64(len(body))})
		_, _ = tw.Write(body)
	}
	_ = tw.Close()
	dir := t.TempDir()
	spec := func(out string) ports.BuildSpec {
		return ports.BuildSpec{Tree: bytes.NewReader(buf.Bytes()), OutPath: filepath.Join(dir, out),
			UUID: buildertest.FixtureUUID, Time: buildertest.FixtureTime}
	}
	if _, err := b.Build(context.Background(), spec("plugin.ext4")); err != nil {
		t.Fatal(err)
	}
	if _, err := ext4build.New().Build(context.Background(), spec("inproc.ext4")); err != nil {
		t.Fatal(err)
	}
	a, _ := buildertest.FileSHA256(filepath.Join(dir, "plugin.ext4"))
	c, _ := buildertest.FileSHA256(filepath.Join(dir, "inproc.ext4"))
	if a == "" || a != c {
		t.Errorf("plugin image sha256 %s, in-process %s", a, c)
	}
}

// TestCancelMidStream cancels while the tree is still streaming; the call
// must return only once the plugin has removed its temporary file.
func TestCancelMidStream(t *testing.T) {
	b := load(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "big", Mode: 0o644, Size: 64 << 20})
		chunk := bytes.Repeat([]byte{0x5a}, 1<<20)
		for i := range 64 {
			if i == 8 {
				cancel() // well into the stream: the plugin has an open temp file
			}
			if _, err := tw.Write(chunk); err != nil {
				return
			}
		}
		pw.Close()
	}()
	dir := t.TempDir()
	_, err := b.Build(ctx, ports.BuildSpec{Tree: &ctxReader{ctx: ctx, r: pr}, OutPath: filepath.Join(dir, "rootfs.ext4"), UUID: buildertest.FixtureUUID})
	pr.CloseWithError(errors.New("test over"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		t.Errorf("cancelled build left %s behind", e.Name())
	}
}

// ctxReader stops reading once ctx is done, as a well-behaved tree does.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// A plugin process that dies mid-build (the OOM killer, a crash, the host
// closing it) cannot remove its temporary image: nothing it wrote may be
// left beside the output all the same.
func TestKilledPluginLeavesNothing(t *testing.T) {
	killPlugin := func(t *testing.T, b *Builder) {
		t.Helper()
		if err := syscall.Kill(b.client.ReattachConfig().Pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	closePlugin := func(t *testing.T, b *Builder) {
		t.Helper()
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		hang    bool // the helper that never finishes; else ext4stream
		opts    Options
		entries bool // BuildEntries (API v3); else Build
		end     func(t *testing.T, b *Builder)
	}{
		{"ext4stream, tree through a pipe, SIGKILL", false, Options{}, false, killPlugin},
		{"ext4stream, tree in chunks, SIGKILL", false, Options{Chunks: true}, false, killPlugin},
		{"ext4stream, the host closes the plugin", false, Options{}, false, closePlugin},
		{"hung plugin, tree, SIGKILL", true, Options{}, false, killPlugin},
		{"hung plugin, entries, SIGKILL", true, Options{}, true, killPlugin},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, opts := pluginBin, tt.opts
			if tt.hang {
				self, err := os.Executable()
				if err != nil {
					t.Fatal(err)
				}
				path, opts.Env = self, []string{helperEnv + "=hang"}
			} else if pluginBin == "" {
				t.Skip("no go toolchain to build the plugin")
			}
			b, err := Load(context.Background(), path, opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			dir := t.TempDir()
			release := make(chan struct{})
			tree := gatedTree(release)
			defer tree.CloseWithError(errors.New("test over"))
			done := make(chan error, 1)
			go func() {
				spec := ports.BuildSpec{Tree: tree, OutPath: filepath.Join(dir, "rootfs.ext4"), UUID: buildertest.FixtureUUID}
				var err error
				if tt.entries {
					_, err = b.Planned().BuildEntries(context.Background(), spec, nil)
				} else {
					_, err = b.Build(context.Background(), spec)
				}
				done <- err
			}()
			waitForTemp(t, dir)
			tt.end(t, b)
			close(release)
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("the build of a killed plugin succeeded")
				}
			case <-time.After(30 * time.Second): // a hang guard, not a timing check
				t.Fatal("Build hangs after its plugin died")
			}
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				t.Errorf("the killed plugin's build left %s behind", e.Name())
			}
		})
	}
}

// gatedTree is a tar stream of one 64 MiB file that stops after 8 MiB,
// until release is closed.
func gatedTree(release <-chan struct{}) *io.PipeReader {
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "big", Mode: 0o644, Size: 64 << 20})
		chunk := bytes.Repeat([]byte{0x5a}, 1<<20)
		for i := range 64 {
			if i == 8 {
				<-release
			}
			if _, err := tw.Write(chunk); err != nil {
				return
			}
		}
		_ = tw.Close()
		pw.Close()
	}()
	return pr
}

// waitForTemp waits until the plugin has a temporary image somewhere
// under dir.
func waitForTemp(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		found := false
		_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() && strings.Contains(d.Name(), ".tmp-") {
				found = true
			}
			return nil
		})
		if found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the plugin made no temporary image in 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
