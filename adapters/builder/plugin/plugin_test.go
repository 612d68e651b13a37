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

	"github.com/cubesandbox/templatecenter/adapters/builder/ext4stream"
	"github.com/cubesandbox/templatecenter/adapters/builder/pluginproto"
	"github.com/cubesandbox/templatecenter/adapters/layers"
	"github.com/cubesandbox/templatecenter/core"
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
func (nameOnly) Build(context.Context, ports.BuildSpec, ports.Tree) (ports.BuildResult, error) {
	return ports.BuildResult{}, errors.New("not a real builder")
}

// hangs is a plugin that opens its temporary image beside spec.OutPath,
// as ext4stream does, and then never finishes, cancelled or not: only a
// kill ends it.
type hangs struct{ nameOnly }

func (hangs) Build(_ context.Context, spec ports.BuildSpec, _ ports.Tree) (ports.BuildResult, error) {
	return hang(spec)
}

func hang(spec ports.BuildSpec) (ports.BuildResult, error) {
	tmp, err := os.CreateTemp(filepath.Dir(spec.OutPath), "."+filepath.Base(spec.OutPath)+".tmp-*")
	if err != nil {
		return ports.BuildResult{}, err
	}
	if _, err := tmp.Write(make([]byte, 1<<20)); err != nil {
		return ports.BuildResult{}, err
	}
	select {}
}

// tarHangs is hangs for a plugin that reads tar.
type tarHangs struct{ nameOnly }

func (tarHangs) BuildTar(_ context.Context, spec ports.BuildSpec, _ io.Reader) (ports.BuildResult, error) {
	return hang(spec)
}

// slowCancel writes its temporary image, then waits for cancellation and
// removes it, as a builder caught mid-write does.
type slowCancel struct{ nameOnly }

func (slowCancel) Build(ctx context.Context, spec ports.BuildSpec, _ ports.Tree) (ports.BuildResult, error) {
	tmp, err := os.CreateTemp(filepath.Dir(spec.OutPath), "."+filepath.Base(spec.OutPath)+".tmp-*")
	if err != nil {
		return ports.BuildResult{}, err
	}
	<-ctx.Done()
	tmp.Close()
	os.Remove(tmp.Name())
	return ports.BuildResult{}, ctx.Err()
}

// tarExt4 reads the tree as tar (API v1) and builds it with the
// in-process ext4stream builder: the tar transport end to end.
type tarExt4 struct{}

func (tarExt4) Name() string   { return "tar-ext4stream" }
func (tarExt4) Format() string { return ext4stream.New().Format() }
func (tarExt4) BuildTar(ctx context.Context, spec ports.BuildSpec, tree io.Reader) (ports.BuildResult, error) {
	f, err := os.CreateTemp("", "tar-content-")
	if err != nil {
		return ports.BuildResult{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	var es ports.TreeSlice
	tr := tar.NewReader(tree)
	var off int64
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return ports.BuildResult{}, fmt.Errorf("read tree: %v: %w", err, core.ErrInvalidArgument)
		}
		e := ports.TreeEntry{Header: h}
		if h.Typeflag == tar.TypeReg && h.Size > 0 {
			n, err := io.Copy(f, tr)
			if err != nil {
				return ports.BuildResult{}, err
			}
			e.File, e.Offset = f, off
			off += n
		}
		es = append(es, e)
	}
	return ext4stream.New().Build(ctx, spec, es)
}

func serveHelper(mode string) {
	p := &pluginproto.GRPCPlugin{Impl: nameOnly{}}
	switch mode {
	case "v2-only":
		p.APIVersions = []string{"v2"}
	case "hang":
		p.Impl = hangs{}
	case "tar-hang":
		p.Impl, p.Tar = nil, tarHangs{}
	case "slow-cancel":
		p.Impl = slowCancel{}
	case "tar":
		p.Impl, p.Tar = nil, tarExt4{}
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
// checks as in-process (adapters/builder/ext4stream), across go-plugin.
func TestConformance(t *testing.T) {
	b := load(t)
	buildertest.RunConformanceTests(t, func(context.Context, *testing.T) (buildertest.Harness, error) {
		return harness{b}, nil
	})
}

// harness shares one plugin process: the suite's builds are sequential.
type harness struct{ b *Builder }

func (h harness) MakeBuilder(context.Context) (ports.RootfsBuilder, error) { return h.b, nil }

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
	if b.Name() != "ext4stream" || b.APIVersion() != pluginproto.APIVersionEntries {
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

// A plugin that speaks only a version the host no longer speaks (v2, the
// tar stream through a named pipe) is refused at load, naming both lists.
func TestLoadRefusesForeignAPIVersion(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	_, err = Load(context.Background(), self, Options{Env: []string{helperEnv + "=v2-only"}})
	if !errors.Is(err, core.ErrUnsupported) || !strings.Contains(err.Error(), "[v2]") || !strings.Contains(err.Error(), "[v3 v1]") {
		t.Fatalf("err = %v, want ErrUnsupported naming v2 and the host's versions", err)
	}
}

func TestLoadMissingBinary(t *testing.T) {
	if _, err := Load(context.Background(), filepath.Join(t.TempDir(), "nope"), Options{}); err == nil {
		t.Fatal("Load of a missing binary succeeded")
	}
}

func TestErrorClassCrossesProcess(t *testing.T) {
	b := load(t)
	tree := ports.TreeSlice{{Header: &tar.Header{Typeflag: tar.TypeReg, Name: "etc/../../escape", Mode: 0o644}}}
	out := filepath.Join(t.TempDir(), "rootfs.ext4")
	_, err := b.Build(context.Background(), ports.BuildSpec{OutPath: out, UUID: buildertest.FixtureUUID}, tree)
	if !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), `"etc/../../escape"`) {
		t.Fatalf("err = %v, want ErrInvalidArgument naming the entry", err)
	}
}

// The plugin must write exactly what the in-process builder writes, over
// either API version.
func TestSameBytesAsInProcess(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i := range 50 {
		body := bytes.Repeat([]byte{byte(i)}, i*1000)
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("f%02d", i), Mode: 0o644, Size: int64(len(body))})
		_, _ = tw.Write(body)
	}
	_ = tw.Close()
	tree := flattenertest.TarEntries(t, buf.Bytes(), true)
	dir := t.TempDir()
	spec := func(out string) ports.BuildSpec {
		return ports.BuildSpec{OutPath: filepath.Join(dir, out), UUID: buildertest.FixtureUUID, Time: buildertest.FixtureTime}
	}
	if _, err := ext4stream.New().Build(context.Background(), spec("inproc.ext4"), tree); err != nil {
		t.Fatal(err)
	}
	want, _ := buildertest.FileSHA256(filepath.Join(dir, "inproc.ext4"))
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, path string
		opts       Options
		api        string
	}{
		{"entries", pluginBin, Options{}, pluginproto.APIVersionEntries},
		{"tar", self, Options{Env: []string{helperEnv + "=tar"}}, pluginproto.APIVersionTar},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.path == "" {
				t.Skip("no go toolchain to build the plugin")
			}
			b, err := Load(context.Background(), c.path, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if b.APIVersion() != c.api {
				t.Fatalf("API %s, want %s", b.APIVersion(), c.api)
			}
			res, err := b.Build(context.Background(), spec(c.name+".ext4"), tree)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := buildertest.FileSHA256(filepath.Join(dir, c.name+".ext4"))
			if want == "" || got != want || res.SHA256 != want {
				t.Errorf("plugin image sha256 %s (reported %s), in-process %s", got, res.SHA256, want)
			}
		})
	}
}

// TestCancelMidBuild cancels a build whose plugin is writing its image;
// the call returns only once the plugin has removed its temporary file.
func TestCancelMidBuild(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := Load(context.Background(), self, Options{Env: []string{helperEnv + "=slow-cancel"}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	done := make(chan error, 1)
	go func() {
		_, err := b.Build(ctx, ports.BuildSpec{OutPath: filepath.Join(dir, "rootfs.ext4"), UUID: buildertest.FixtureUUID}, ports.TreeSlice(nil))
		done <- err
	}()
	waitForTemp(t, dir)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		t.Errorf("cancelled build left %s behind", e.Name())
	}
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
		name string
		mode string // the helper plugin's
		end  func(t *testing.T, b *Builder)
	}{
		{"entries, SIGKILL", "hang", killPlugin},
		{"entries, the host closes the plugin", "hang", closePlugin},
		{"tar, SIGKILL", "tar-hang", killPlugin},
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tree := flattenertest.TarEntries(t, flattenertest.Tar(t, flattenertest.Reg("big", strings.Repeat("z", 8<<20))), false)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := Load(context.Background(), self, Options{Env: []string{helperEnv + "=" + tt.mode}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			dir := t.TempDir()
			done := make(chan error, 1)
			go func() {
				_, err := b.Build(context.Background(), ports.BuildSpec{OutPath: filepath.Join(dir, "rootfs.ext4"), UUID: buildertest.FixtureUUID}, tree)
				done <- err
			}()
			waitForTemp(t, dir)
			tt.end(t, b)
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
