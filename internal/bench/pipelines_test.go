package bench

import (
	"archive/tar"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/internal/testenv"
	"github.com/cubesandbox/templatecenter/internal/testimage"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

var (
	imageOnce sync.Once
	imageRef  string
	imageSize int64
	imageErr  error
)

// benchImage pushes the benchmark image once per process: the Go toolchain
// tree (~270 MB, ~17k files), 240 MB of incompressible data in 1,200 files
// that also whites out part of the first layer, and a 64 MB file.
func benchImage(b *testing.B) string {
	reg := testenv.Get(b, testenv.Registry)
	imageOnce.Do(func() {
		dir := b.TempDir()
		goroot := strings.TrimSpace(run(b, "go", "env", "GOROOT"))
		l1, err := testimage.DirLayer(goroot, "opt/go", filepath.Join(dir, "l1.tar"))
		if err != nil {
			imageErr = err
			return
		}
		data := filepath.Join(dir, "data")
		for i := 0; i < 1200; i++ {
			writeRandom(b, filepath.Join(data, fmt.Sprintf("d%02d", i%40), fmt.Sprintf("f%04d.bin", i)), 200<<10)
		}
		l2, err := testimage.DirLayer(data, "srv/data", filepath.Join(dir, "l2.tar"))
		if err != nil {
			imageErr = err
			return
		}
		wh, err := testimage.Layer([]testimage.Entry{testimage.Whiteout("opt/go/test"), testimage.Opaque("opt/go/misc")})
		if err != nil {
			imageErr = err
			return
		}
		big := filepath.Join(dir, "big")
		writeRandom(b, filepath.Join(big, "blob.bin"), 64<<20)
		l3, err := testimage.DirLayer(big, "var/lib/big", filepath.Join(dir, "l3.tar"))
		if err != nil {
			imageErr = err
			return
		}
		img, err := testimage.Image([]v1.Layer{l1, l2, wh, l3}, v1.Config{Cmd: []string{"/bin/sh"}})
		if err != nil {
			imageErr = err
			return
		}
		imageRef = reg + "/bench/pipelines:v1"
		if _, imageErr = testimage.Push(imageRef, img); imageErr != nil {
			return
		}
		imageSize = uncompressedSize(img)
	})
	if imageErr != nil {
		b.Fatalf("bench image: %v", imageErr)
	}
	return imageRef
}

// BenchmarkPipelines runs each pipeline once per iteration from a cold
// cache and prints times and ratios against the reference pipelines.
func BenchmarkPipelines(b *testing.B) {
	testenv.Root(b, "the reference pipelines need root (umoci unpack, device nodes)")
	for _, tool := range []string{"skopeo", "umoci", "mkfs.ext4", "e2fsck", "resize2fs", "tar"} {
		testenv.Tool(b, tool)
	}
	ref := benchImage(b)
	bin := binDir(b)
	host := strings.SplitN(ref, "/", 2)[0]
	times := map[string]time.Duration{}
	sizes := map[string]int64{}
	pipelines := []struct {
		name string
		run  func(b *testing.B, work string) string
	}{
		{"templatecenter-mkfs", func(b *testing.B, work string) string { return ours(b, bin, ref, host, "mkfs", work) }},
		{"templatecenter-ext4stream", func(b *testing.B, work string) string { return ours(b, bin, ref, host, "ext4stream", work) }},
		{"upstream-dockerless", func(b *testing.B, work string) string { return dockerless(b, ref, work) }},
		{"flatten-tar-mkfs", func(b *testing.B, work string) string { return flattenTarMkfs(b, ref, work) }},
	}
	for _, p := range pipelines {
		b.Run(p.name, func(b *testing.B) {
			var total time.Duration
			for i := 0; i < b.N; i++ {
				work := b.TempDir()
				start := time.Now()
				img := p.run(b, work)
				total += time.Since(start)
				st, err := os.Stat(img)
				if err != nil {
					b.Fatal(err)
				}
				sizes[p.name] = st.Size()
				os.RemoveAll(work)
			}
			times[p.name] = total / time.Duration(b.N)
			b.ReportMetric(float64(imageSize)/1e6/times[p.name].Seconds(), "MB/s")
		})
	}
	report(imageSize, times, sizes)
}

func report(content int64, times map[string]time.Duration, sizes map[string]int64) {
	if len(times) == 0 {
		return
	}
	names := testimage.SortedNames(times)
	sort.SliceStable(names, func(i, j int) bool { return times[names[i]] < times[names[j]] })
	fmt.Printf("\nimage: %.0f MB uncompressed content, 4 layers\n", float64(content)/1e6)
	fmt.Printf("%-28s %10s %12s %14s %14s\n", "pipeline", "seconds", "image MB", "vs dockerless", "vs flatten+tar")
	for _, n := range names {
		fmt.Printf("%-28s %10.2f %12.1f %13.2fx %13.2fx\n", n, times[n].Seconds(), float64(sizes[n])/1e6,
			ratio(times["upstream-dockerless"], times[n]), ratio(times["flatten-tar-mkfs"], times[n]))
	}
}

// ratio is how many times faster d is than ref (>1 means faster).
func ratio(ref, d time.Duration) float64 {
	if ref == 0 || d == 0 {
		return 0
	}
	return ref.Seconds() / d.Seconds()
}

func ours(b *testing.B, bin, ref, host, builder, work string) string {
	out := filepath.Join(work, "rootfs.ext4")
	cmd := exec.Command(filepath.Join(bin, "templatecenter"), "build", "--image", ref, "--insecure-registry", host,
		"--builder", builder, "--out", out, "--json")
	cmd.Env = append(os.Environ(),
		"CUBE_TEMPLATE_CENTER_LAYER_CACHE_DIR="+filepath.Join(work, "cache"),
		"CUBE_TEMPLATE_CENTER_ARTIFACT_WORK_DIR="+work,
		"CUBE_TEMPLATE_CENTER_PLUGIN_DIR="+bin)
	outb, err := cmd.Output()
	if err != nil {
		b.Fatalf("templatecenter build (%s): %v\n%s", builder, err, stderrOf(err))
	}
	var res struct {
		PhasesMS map[string]int64 `json:"phases_ms"`
	}
	if json.Unmarshal(outb, &res) == nil {
		b.Logf("%s phases (ms): %v", builder, res.PhasesMS)
	}
	return out
}

// dockerless is upstream's pipeline: skopeo copy, umoci unpack, mkfs.ext4 -d
// into a generously sized file, e2fsck -fy, resize2fs -M, 2 MiB alignment,
// e2fsck -fn.
func dockerless(b *testing.B, ref, work string) string {
	layout := filepath.Join(work, "oci")
	run(b, "skopeo", "copy", "--src-tls-verify=false", "docker://"+ref, "oci:"+layout+":bench")
	bundle := filepath.Join(work, "bundle")
	run(b, "umoci", "unpack", "--image", layout+":bench", bundle)
	return mkfsLikeUpstream(b, filepath.Join(bundle, "rootfs"), filepath.Join(work, "rootfs.ext4"), true)
}

// flattenTarMkfs flattens with go-containerregistry, untars, then mkfs -d.
func flattenTarMkfs(b *testing.B, ref, work string) string {
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		b.Fatal(err)
	}
	img, err := remote.Image(r)
	if err != nil {
		b.Fatal(err)
	}
	root := filepath.Join(work, "rootfs")
	if err := os.MkdirAll(root, 0o755); err != nil {
		b.Fatal(err)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	cmd := exec.Command("tar", "-x", "--same-owner", "-p", "--xattrs", "--xattrs-include=*", "-C", root)
	cmd.Stdin = rc
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("tar -x: %v\n%s", err, out)
	}
	return mkfsLikeUpstream(b, root, filepath.Join(work, "rootfs.ext4"), false)
}

func mkfsLikeUpstream(b *testing.B, root, img string, shrink bool) string {
	var size, files int64
	filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			size += info.Size()
			files++
		}
		return nil
	})
	raw := size + 256<<20 + size/10 + files*1024
	if raw < 1<<30 {
		raw = 1 << 30
	}
	raw = (raw + 256<<20 - 1) / (256 << 20) * (256 << 20)
	run(b, "truncate", "-s", fmt.Sprint(raw), img)
	run(b, "mkfs.ext4", "-q", "-F", "-b", "4096", "-d", root, img)
	if shrink {
		runOK(b, []int{0, 1, 2}, "e2fsck", "-fy", img)
		run(b, "resize2fs", "-M", img)
		st, _ := os.Stat(img)
		aligned := (st.Size() + 2<<20 - 1) / (2 << 20) * (2 << 20)
		run(b, "truncate", "-s", fmt.Sprint(aligned), img)
		run(b, "e2fsck", "-fn", img)
	}
	return img
}

func uncompressedSize(img v1.Image) int64 {
	ls, err := img.Layers()
	if err != nil {
		return 0
	}
	var n int64
	for _, l := range ls {
		rc, err := l.Uncompressed()
		if err != nil {
			continue
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			n += h.Size
		}
		rc.Close()
	}
	return n
}

func writeRandom(b *testing.B, path string, n int64) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := io.CopyN(f, rand.Reader, n); err != nil {
		b.Fatal(err)
	}
}

func binDir(b *testing.B) string {
	dir := os.Getenv("CUBE_BIN_DIR")
	if dir == "" {
		abs, _ := filepath.Abs("../../bin")
		dir = abs
	}
	for _, f := range []string{"templatecenter", "ext4stream"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			b.Fatalf("%s not built in %s (run make build): %v", f, dir, err)
		}
	}
	return dir
}

func run(b *testing.B, name string, args ...string) string {
	return runOK(b, []int{0}, name, args...)
}

func runOK(b *testing.B, ok []int, name string, args ...string) string {
	out, err := exec.Command(name, args...).CombinedOutput()
	code := 0
	if ee, isExit := err.(*exec.ExitError); isExit {
		code = ee.ExitCode()
	} else if err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	for _, c := range ok {
		if c == code {
			return string(out)
		}
	}
	b.Fatalf("%s %s: exit %d\n%s", name, strings.Join(args, " "), code, out)
	return ""
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
