package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/cubesandbox/templatecenter/testkit/testimage"
)

// devBinaries builds what make demo uses: cubemaster, cubemastercli and
// the demo driver.
func devBinaries(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, pkg := range []string{"apps/cubemaster", "apps/cubemastercli", "internal/tools/demo"} {
		out, err := exec.Command("go", "build", "-o", dir+"/", "github.com/cubesandbox/templatecenter/"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	return dir
}

// devInfo is what cubemaster dev writes to --ready-file.
type devInfo struct {
	Master         string `json:"master"`
	TemplateCenter string `json:"template_center"`
	NodeDataDir    string `json:"node_data_dir"`
	ExampleImage   string `json:"example_image"`
}

// startDev runs cubemaster dev on loopback with free ports and waits for
// its ready file.
func startDev(t *testing.T, bin string, extra ...string) (devInfo, *proc) {
	t.Helper()
	data := t.TempDir()
	ready := filepath.Join(data, "ready.json")
	p := &proc{name: "cubemaster dev", bin: filepath.Join(bin, "cubemaster"),
		args: append([]string{"dev", "--data-dir", data, "--listen", "127.0.0.1:0", "--ready-file", ready, "--log-level", "info"}, extra...)}
	p.start(t)
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("---- dev log ----\n%s", tail(p.log.String(), 6000))
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		var info devInfo
		if b, err := os.ReadFile(ready); err == nil && json.Unmarshal(b, &info) == nil && info.Master != "" {
			return info, p
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("dev not ready:\n%s", p.log.String())
	return devInfo{}, nil
}

// TestMakeDemo runs what `make demo` runs and checks its summary.
func TestMakeDemo(t *testing.T) {
	bin := devBinaries(t)
	out, err := exec.Command(filepath.Join(bin, "demo"), "--bin", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	for _, want := range []string{"Demo summary", "template id    demo-", "(READY on node-1)", "artifact id    rfs-",
		"verified on the node", "time per phase", "pull", "distribute to node", "stopping cubemaster dev"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	// The summary is read after the demo ended: every file it names exists.
	_, summary, _ := bytes.Cut(out, []byte("Demo summary"))
	for _, p := range regexp.MustCompile(`/[^\s:;()]+`).FindAll(summary, -1) {
		if _, err := os.Stat(string(p)); err != nil {
			t.Errorf("the summary names %s, which is gone after the demo: %v", p, err)
		}
	}
}

// scrape returns the value of one series (name{labels}) on a /metrics page.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func value(page, series string) (float64, bool) {
	for _, line := range strings.Split(page, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}

// TestMetricsAfterARealBuild builds the example image in dev mode and
// checks the counters both services export.
func TestMetricsAfterARealBuild(t *testing.T) {
	bin := devBinaries(t)
	info, _ := startDev(t, bin)
	master := strings.TrimPrefix(info.Master, "http://")
	out, err := exec.Command(filepath.Join(bin, "cubemastercli"), "-a", master, "tpl", "create-from-image",
		"--image", info.ExampleImage, "--writable-layer-size", "1Gi", "--template-id", "tpl-metrics", "--interval", "100ms").CombinedOutput()
	if err != nil {
		t.Fatalf("create-from-image: %v\n%s", err, out)
	}
	// One envelope error: an unknown template.
	if resp, err := http.Get(info.Master + "/cube/template?template_id=nope"); err == nil {
		resp.Body.Close()
	}

	tc := scrape(t, info.TemplateCenter+"/metrics")
	m := scrape(t, info.Master+"/metrics")
	checks := []struct {
		page, series string
		min          float64
	}{
		{tc, "cube_template_pulled_bytes_total", 1},
		{tc, `cube_template_layer_cache_lookups_total{result="miss"}`, 2}, // the example image has two layers
		{tc, `cube_template_build_phase_duration_seconds_count{phase="PULLING"}`, 1},
		{tc, "cube_template_active_builds", 0},
		{tc, `cube_template_status_callbacks_total{result="delivered"}`, 1},
		{m, `cube_template_node_operations_total{node="node-1",op="create_image",result="ok"}`, 1},
		{m, `cube_template_node_operations_total{node="node-1",op="app_snapshot",result="ok"}`, 1},
		{m, `cube_template_status_callbacks_total{result="applied"}`, 1},
		{m, `cube_template_http_errors_total{code="130404",method="GET",route="/cube/template"}`, 1},
		// Outcomes: the build on the data plane, the job on the master.
		{tc, `cube_template_builds_total{result="built"}`, 1},
		{m, `cube_template_jobs_finished_total{operation="CREATE",result="ready"}`, 1},
	}
	for _, c := range checks {
		v, ok := value(c.page, c.series)
		if !ok || v < c.min {
			t.Errorf("%s = %v (present %v), want at least %v", c.series, v, ok, c.min)
		}
	}
	for _, absent := range []string{"cube_template_pulled_bytes_total", "cube_template_build_phase_duration_seconds", "cube_template_active_builds"} {
		if strings.Contains(m, absent) {
			t.Errorf("the master exports %s, which it never sets", absent)
		}
	}
}

// throttled serves a registry whose blob downloads trickle (about 640
// KiB/s per blob), so a build's pull lasts long enough to watch, with
// room for a loaded machine's scheduling.
func throttled(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || !strings.Contains(r.URL.Path, "/blobs/sha256:") {
			h.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		body := rec.Body.Bytes()
		for len(body) > 0 {
			n := min(len(body), 64<<10)
			if _, err := w.Write(body[:n]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			body = body[n:]
			time.Sleep(100 * time.Millisecond)
		}
	})
}

// openPTY opens a pseudo-terminal pair of cols columns.
func openPTY(cols uint16) (ptm, pts *os.File, err error) {
	ptm, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*os.File, *os.File, error) { ptm.Close(); return nil, nil, err }
	if err := unix.IoctlSetPointerInt(int(ptm.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		return fail(err)
	}
	n, err := unix.IoctlGetInt(int(ptm.Fd()), unix.TIOCGPTN)
	if err != nil {
		return fail(err)
	}
	pts, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return fail(err)
	}
	if err := unix.IoctlSetWinsize(int(pts.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: cols}); err != nil {
		pts.Close()
		return fail(err)
	}
	return ptm, pts, nil
}

// pulledBytes finds the bytes pulled so far on the CLI's live line
// ("PULLING  12% [###---] 1.2MiB/3.0MiB 1/3 layers").
var pulledBytes = regexp.MustCompile(`PULLING +\d+% \[[#-]*\] ([0-9.]+(?:[KMG]iB|B))/`)

// TestProgressBarsInAPseudoTerminal runs the CLI in a real pseudo-terminal
// of 80 columns during a real build whose pull is slowed down: the pull
// bar advances, a line marks each finished phase, the distribution bar
// ends full, and no line is wider than the terminal.
func TestProgressBarsInAPseudoTerminal(t *testing.T) {
	reg := httptest.NewServer(throttled(registry.New(registry.Logger(log.New(io.Discard, "", 0)))))
	t.Cleanup(reg.Close)
	host := strings.TrimPrefix(reg.URL, "http://")
	var layers []v1.Layer
	for i := range 3 {
		blob := make([]byte, 1<<20)
		rand.Read(blob)
		l, err := testimage.Layer([]testimage.Entry{testimage.Dir(fmt.Sprintf("d%d", i), 0o755),
			testimage.File(fmt.Sprintf("d%d/blob", i), 0o644, string(blob))})
		if err != nil {
			t.Fatal(err)
		}
		layers = append(layers, l)
	}
	img, err := testimage.Image(layers, v1.Config{Cmd: []string{"/bin/true"}})
	if err != nil {
		t.Fatal(err)
	}
	ref := host + "/pty/slow:v1"
	if _, err := testimage.Push(ref, img); err != nil {
		t.Fatal(err)
	}

	bin := devBinaries(t)
	info, _ := startDev(t, bin, "--insecure-registry", host)
	ptm, pts, err := openPTY(80)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer ptm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "cubemastercli"), "-a", strings.TrimPrefix(info.Master, "http://"),
		"tpl", "create-from-image", "--image", ref, "--writable-layer-size", "1Gi", "--interval", "100ms")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pts, pts, pts
	cmd.Env = append(os.Environ(), "TERM=xterm")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pts.Close()
	var screen bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		_, _ = io.Copy(&screen, bufio.NewReader(ptm)) // ends with EIO once the CLI exits
	}()
	runErr := cmd.Wait()
	<-read
	out := screen.String()
	if runErr != nil {
		t.Fatalf("create-from-image in a pty: %v\n%q", runErr, out)
	}

	seen := map[string]bool{}
	for _, m := range pulledBytes.FindAllStringSubmatch(out, -1) {
		seen[m[1]] = true
	}
	if len(seen) < 3 {
		t.Errorf("the pull bar did not advance: pulled bytes seen %v\n%q", seen, out)
	}
	for _, want := range []string{"\r\033[K", "done PULLING", "nodes [", "1/1 ready", "[####", "/3 layers", "status:                    READY"} {
		if !strings.Contains(out, want) {
			t.Errorf("screen lacks %q:\n%q", want, out)
		}
	}
	live, _, _ := strings.Cut(out, "job_id:") // the summary after it may hold long hashes
	for _, line := range regexp.MustCompile(`\r\n|\r|\n|\x1b\[1A|\x1b\[K`).Split(live, -1) {
		if len(line) >= 80 {
			t.Errorf("a line of %d columns in an 80-column terminal: %q", len(line), line)
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the build did not finish in time")
	}
}
