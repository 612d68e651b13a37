package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Run is one timed run of one pipeline.
type Run struct {
	Pipeline string
	Round    int
	Wall     time.Duration
	// PeakRSS is the largest resident set of any one process of the
	// pipeline, in bytes (getrusage ru_maxrss; the page cache is not in it).
	PeakRSS int64
	// CPU is the user + system time of the pipeline's processes (not of
	// the registry serving them).
	CPU        time.Duration
	ImageBytes int64
	Phases     map[string]int64 // ours: milliseconds per phase from --json
	// HeapPeak and HeapLive are ours' largest Go heap at the end of a
	// collection and largest live heap after one, in bytes, when it ran
	// with GODEBUG=gctrace=1 (the scale part); 0 otherwise.
	HeapPeak, HeapLive int64
}

// Env is what the pipelines need.
type Env struct {
	Bin      string // bin/ with templatecenter, ext4stream and this program
	Self     string // this program, for the extract helper
	Work     string // scratch root; each run gets a fresh directory below it
	Ref      string // the pushed image
	Registry string // host:port of the registry
	Image    *Image

	mu  sync.Mutex
	cpu time.Duration // CPU time of measured commands, see takeCPU
}

// timed runs cmds one after another (each a full command line), returns
// the wall time and the largest peak RSS among them.
func (e *Env) timed(dir string, cmds ...[]string) (time.Duration, int64, error) {
	start := time.Now()
	var peak int64
	for _, c := range cmds {
		rss, err := e.runRSS(dir, c...)
		peak = max(peak, rss)
		if err != nil {
			return 0, peak, err
		}
	}
	return time.Since(start), peak, nil
}

// RSSHelper is the subcommand that runs a command and reports its peak
// RSS. A child started by this (large) process inherits its high-water
// mark: Go starts children with vfork, and exec keeps the old address
// space's peak in ru_maxrss. Started from the small helper, the command's
// ru_maxrss is its own (plus the helper's few MiB).
const RSSHelper = "rss-helper"

// RunRSSHelper is `cubebench rss-helper FILE ARGV...`: it runs ARGV with
// this process's stdin, stdout and stderr, writes its ru_maxrss in bytes
// to FILE and exits with its status.
func RunRSSHelper(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: cubebench rss-helper FILE ARGV...")
		return 2
	}
	cmd := exec.Command(args[1], args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	if cmd.ProcessState == nil {
		fmt.Fprintln(os.Stderr, err)
		return 127
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		_ = os.WriteFile(args[0], []byte(fmt.Sprint(ru.Maxrss<<10, " ", int64(cpu))), 0o644)
	}
	return cmd.ProcessState.ExitCode()
}

// measured wraps argv in the RSS helper and returns the command and a
// function reading its peak RSS (and adding its CPU time to e.cpu) once
// it has exited.
func (e *Env) measured(argv ...string) (*exec.Cmd, func() int64) {
	f, err := os.CreateTemp(e.Work, "rss-")
	if err != nil {
		return exec.Command(argv[0], argv[1:]...), func() int64 { return 0 }
	}
	f.Close()
	cmd := exec.Command(e.Self, append([]string{RSSHelper, f.Name()}, argv...)...)
	return cmd, func() int64 {
		defer os.Remove(f.Name())
		b, _ := os.ReadFile(f.Name())
		var rss, cpu int64 // peak resident set in bytes; user + system ns
		fmt.Sscan(string(b), &rss, &cpu)
		e.mu.Lock()
		e.cpu += time.Duration(cpu)
		e.mu.Unlock()
		return rss
	}
}

// takeCPU returns the CPU time of the commands run since the last call.
func (e *Env) takeCPU() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	d := e.cpu
	e.cpu = 0
	return d
}

// runRSS runs one command and returns its peak RSS in bytes.
func (e *Env) runRSS(dir string, argv ...string) (int64, error) {
	cmd, rss := e.measured(argv...)
	cmd.Dir = dir
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	if err != nil {
		return rss(), fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, tailOf(errb.String(), 2000))
	}
	return rss(), nil
}

func tailOf(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// OursResult is the --json report of templatecenter build.
type OursResult struct {
	SHA256       string           `json:"sha256"`
	SizeBytes    int64            `json:"size_bytes"`
	PhasesMS     map[string]int64 `json:"phases_ms"`
	Entries      int              `json:"entries"`
	ContentBytes int64            `json:"content_bytes"`
}

// Ours runs `templatecenter build` with builder, the layer cache in cache
// (fresh for a cold build, kept for a warm one) and the writable layer
// size wls (another size is another spec, hence another artifact).
func (e *Env) Ours(builder, cache, wls, out string, extraEnv ...string) (Run, OursResult, error) {
	cmd, rss := e.measured(filepath.Join(e.Bin, "templatecenter"), "build", "--image", e.Ref, "--insecure-registry", e.Registry,
		"--builder", builder, "--writable-layer-size", wls, "--out", out, "--json")
	cmd.Env = append(os.Environ(),
		"CUBE_TEMPLATE_CENTER_LAYER_CACHE_DIR="+cache,
		"CUBE_TEMPLATE_CENTER_ARTIFACT_WORK_DIR="+filepath.Dir(out),
		"CUBE_TEMPLATE_CENTER_PLUGIN_DIR="+e.Bin)
	cmd.Env = append(cmd.Env, extraEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := Run{Wall: time.Since(start), PeakRSS: rss()}
	r.HeapPeak, r.HeapLive = ParseGCTrace(stderr.String())
	if err != nil {
		return r, OursResult{}, fmt.Errorf("templatecenter build --builder %s: %v\n%s", builder, err, tailOf(stderr.String(), 2000))
	}
	var res OursResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return r, res, fmt.Errorf("templatecenter build --json: %v", err)
	}
	r.Phases, r.ImageBytes = res.PhasesMS, res.SizeBytes
	return r, res, nil
}

// Dockerless is upstream's pipeline: skopeo copy to an OCI layout, umoci
// unpack, mkfs.ext4 -d into a file sized from the tree, e2fsck -fy,
// resize2fs -M, 2 MiB alignment, e2fsck -fn.
func (e *Env) Dockerless(work string) (Run, error) {
	layout := filepath.Join(work, "oci")
	bundle := filepath.Join(work, "bundle")
	img := filepath.Join(work, "rootfs.ext4")
	start := time.Now()
	_, rss1, err := e.timed(work,
		[]string{"skopeo", "copy", "--quiet", "--src-tls-verify=false", "docker://" + e.Ref, "oci:" + layout + ":bench"},
		[]string{"umoci", "unpack", "--image", layout + ":bench", bundle})
	if err != nil {
		return Run{}, err
	}
	rss2, err := e.mkfsFromDir(work, filepath.Join(bundle, "rootfs"), img, true)
	if err != nil {
		return Run{}, err
	}
	return Run{Wall: time.Since(start), PeakRSS: max(rss1, rss2), ImageBytes: fileSize(img)}, nil
}

// FlattenTarMkfs flattens with go-containerregistry's mutate.Extract (this
// program's extract helper), untars with GNU tar and runs mkfs.ext4 -d.
func (e *Env) FlattenTarMkfs(work string) (Run, error) {
	root := filepath.Join(work, "rootfs")
	img := filepath.Join(work, "rootfs.ext4")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return Run{}, err
	}
	start := time.Now()
	extract, xrss := e.measured(e.Self, "extract", "-insecure", e.Ref)
	untar, trss := e.measured("tar", "-x", "--same-owner", "-p", "--xattrs", "--xattrs-include=*", "-C", root)
	// An OS pipe: the tree goes from one child to the other, not through
	// this process.
	pr, pw, err := os.Pipe()
	if err != nil {
		return Run{}, err
	}
	var xerrb, terrb bytes.Buffer
	extract.Stdout, extract.Stderr = pw, &xerrb
	untar.Stdin, untar.Stderr = pr, &terrb
	if err := untar.Start(); err != nil {
		return Run{}, err
	}
	if err := extract.Start(); err != nil {
		return Run{}, err
	}
	pr.Close()
	pw.Close()
	xerr, terr := extract.Wait(), untar.Wait()
	if err := errors.Join(xerr, terr); err != nil {
		var errb bytes.Buffer
		errb.Write(xerrb.Bytes())
		errb.Write(terrb.Bytes())
		return Run{}, fmt.Errorf("extract | tar -x: %v\n%s", err, tailOf(errb.String(), 2000))
	}
	rss := max(xrss(), trss())
	rss2, err := e.mkfsFromDir(work, root, img, false)
	if err != nil {
		return Run{}, err
	}
	return Run{Wall: time.Since(start), PeakRSS: max(rss, rss2), ImageBytes: fileSize(img)}, nil
}

// mkfsFromDir is the way upstream sizes and formats: content plus 256 MiB
// plus 10% plus 1 KiB per file, at least 1 GiB, rounded to 256 MiB; then,
// when shrink is set, e2fsck -fy, resize2fs -M, 2 MiB alignment and a
// last e2fsck -fn.
func (e *Env) mkfsFromDir(work, root, img string, shrink bool) (int64, error) {
	var size, files int64
	filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			size += info.Size()
			files++
		}
		return nil
	})
	raw := max(size+256<<20+size/10+files*1024, 1<<30)
	raw = (raw + 256<<20 - 1) / (256 << 20) * (256 << 20)
	if err := os.Truncate(img, 0); err != nil && !os.IsNotExist(err) {
		return 0, err
	}
	f, err := os.Create(img)
	if err != nil {
		return 0, err
	}
	f.Close()
	if err := os.Truncate(img, raw); err != nil {
		return 0, err
	}
	peak, err := e.runRSS(work, "mkfs.ext4", "-q", "-F", "-b", "4096", "-d", root, img)
	if err != nil || !shrink {
		return peak, err
	}
	// e2fsck -fy exits 1 when it fixed something, which is fine here.
	if rss, err := e.runRSS(work, "e2fsck", "-fy", img); err != nil && !exitCodeIn(err, 1) {
		return peak, err
	} else {
		peak = max(peak, rss)
	}
	rss, err := e.runRSS(work, "resize2fs", "-M", img)
	if err != nil {
		return peak, err
	}
	peak = max(peak, rss)
	aligned := (fileSize(img) + 2<<20 - 1) / (2 << 20) * (2 << 20)
	if err := os.Truncate(img, aligned); err != nil {
		return peak, err
	}
	rss, err = e.runRSS(work, "e2fsck", "-fn", img)
	return max(peak, rss), err
}

func exitCodeIn(err error, codes ...int) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		s := err.Error()
		for _, c := range codes {
			if strings.Contains(s, fmt.Sprintf("exit status %d", c)) {
				return true
			}
		}
		return false
	}
	for _, c := range codes {
		if ee.ExitCode() == c {
			return true
		}
	}
	return false
}

func fileSize(p string) int64 {
	st, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return st.Size()
}

// DecodeBound decompresses every layer blob at once with tool -d (pigz,
// or igzip, the fastest gzip decoder here) to /dev/null: the time no
// pipeline that decodes the image with that decoder can beat on this
// machine.
func (e *Env) DecodeBound(tool string) (Run, error) {
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(e.Image.Layers))
	rss := make([]int64, len(e.Image.Layers))
	for i, l := range e.Image.Layers {
		wg.Go(func() {
			rss[i], errs[i] = e.runRSS(e.Image.Dir, tool, "-dc", l.File) // stdout: the null device
		})
	}
	wg.Wait()
	r := Run{Wall: time.Since(start)}
	for _, v := range rss {
		r.PeakRSS = max(r.PeakRSS, v)
	}
	return r, errors.Join(errs...)
}
