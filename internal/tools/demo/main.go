package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// devInfo is what cubemaster dev writes to its --ready-file.
type devInfo struct {
	Master         string `json:"master"`
	TemplateCenter string `json:"template_center"`
	NodeID         string `json:"node_id"`
	NodeDataDir    string `json:"node_data_dir"`
	ExampleImage   string `json:"example_image"`
	DataDir        string `json:"data_dir"`
	Builder        string `json:"builder"`
}

func main() {
	bin := flag.String("bin", "bin", "directory holding cubemaster and cubemastercli")
	dataDir := flag.String("data-dir", "", "data directory for dev (default: a new temporary one, removed afterwards)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *bin, *dataDir); err != nil {
		fmt.Fprintln(os.Stderr, "demo: "+err.Error())
		os.Exit(1)
	}
}

func run(ctx context.Context, bin, dataDir string) error {
	start := time.Now()
	temporary := dataDir == ""
	if temporary {
		d, err := os.MkdirTemp("", "cube-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dataDir = d
	}
	readyFile := filepath.Join(dataDir, "ready.json")
	logPath := filepath.Join(dataDir, "dev.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()

	kept := ""
	if temporary {
		kept = "; removed when the demo ends, --data-dir keeps it"
	}
	fmt.Printf("==> starting cubemaster dev (data in %s, log in %s%s)\n", dataDir, logPath, kept)
	dev := exec.Command(filepath.Join(bin, "cubemaster"), "dev", "--data-dir", dataDir, "--listen", "127.0.0.1:0",
		"--ready-file", readyFile, "--log-level", "info")
	dev.Stdout, dev.Stderr = logFile, logFile
	if err := dev.Start(); err != nil {
		return fmt.Errorf("start cubemaster dev (run make build first): %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- dev.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = dev.Process.Kill()
			<-exited
		}
	}()
	info, err := waitForDev(ctx, readyFile, exited)
	if err != nil {
		return fmt.Errorf("%w\n%s", err, tail(logPath))
	}
	fmt.Printf("==> dev is up in %.1fs: master %s, node %s, example image %s\n",
		time.Since(start).Seconds(), info.Master, info.NodeID, info.ExampleImage)

	templateID := "demo-" + randHex(4)
	master := strings.TrimPrefix(info.Master, "http://")
	fmt.Printf("==> cubemastercli tpl create-from-image --image %s --template-id %s\n", info.ExampleImage, templateID)
	buildStart := time.Now()
	cli := exec.CommandContext(ctx, filepath.Join(bin, "cubemastercli"), "-a", master, "tpl", "create-from-image",
		"--image", info.ExampleImage, "--writable-layer-size", "1Gi", "--template-id", templateID, "--interval", "100ms")
	cli.Stdin, cli.Stdout, cli.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cli.Run(); err != nil {
		return fmt.Errorf("create-from-image failed: %w\n%s", err, tail(logPath))
	}
	buildTime := time.Since(buildStart)

	var tpl struct {
		Ret struct {
			Code int `json:"ret_code"`
		} `json:"ret"`
		Status   string `json:"status"`
		Replicas []struct {
			NodeID     string `json:"node_id"`
			Status     string `json:"status"`
			ArtifactID string `json:"artifact_id"`
		} `json:"replicas"`
	}
	if err := getJSON(ctx, info.Master+"/cube/template?"+url.Values{"template_id": {templateID}}.Encode(), &tpl); err != nil {
		return err
	}
	if tpl.Status != "READY" || len(tpl.Replicas) != 1 || tpl.Replicas[0].Status != "READY" {
		return fmt.Errorf("template %s is %s with replicas %+v, want READY on %s", templateID, tpl.Status, tpl.Replicas, info.NodeID)
	}
	artifactID := tpl.Replicas[0].ArtifactID
	var art struct {
		Job struct {
			Artifact struct {
				SHA256 string `json:"ext4_sha256"`
				Size   int64  `json:"ext4_size_bytes"`
			} `json:"artifact"`
		} `json:"job"`
	}
	if err := getJSON(ctx, info.Master+"/cube/rootfs-artifact?"+url.Values{"artifact_id": {artifactID}}.Encode(), &art); err != nil {
		return err
	}
	onNode := filepath.Join(info.NodeDataDir, "cubebox", artifactID, artifactID+".ext4")
	sum, size, err := fileSHA256(onNode)
	if err != nil {
		return fmt.Errorf("the artifact is not on the node: %w", err)
	}
	if sum != art.Job.Artifact.SHA256 || size != art.Job.Artifact.Size {
		return fmt.Errorf("artifact on the node %s: sha256 %s, %d bytes; the master recorded %s, %d bytes",
			onNode, sum, size, art.Job.Artifact.SHA256, art.Job.Artifact.Size)
	}

	phases, err := phaseTimes(ctx, info)
	if err != nil {
		return err
	}

	fmt.Printf("==> stopping cubemaster dev\n")
	_ = dev.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			return fmt.Errorf("cubemaster dev did not stop cleanly: %w\n%s", err, tail(logPath))
		}
	case <-time.After(40 * time.Second):
		return fmt.Errorf("cubemaster dev did not stop within 40s\n%s", tail(logPath))
	}

	// The summary names only what still exists once the demo has ended:
	// a temporary data directory (the node's copy in it) is removed.
	where := onNode
	if temporary {
		where = "its copy was in the temporary data directory, now removed"
	}
	fmt.Printf(`
Demo summary
  template id    %s (READY on %s)
  artifact id    %s
  sha256         %s (verified on the node; %s)
  size           %d bytes (%.1f MiB)
  builder        %s
  time per phase
`, templateID, info.NodeID, artifactID, sum, where, size, float64(size)/(1<<20), info.Builder)
	for _, p := range phases {
		fmt.Printf("    %-22s %8.1f ms\n", p.name, p.ms)
	}
	fmt.Printf("  create-from-image, submit to READY   %.2fs\n  whole demo                           %.2fs\n", buildTime.Seconds(), time.Since(start).Seconds())
	return nil
}

func waitForDev(ctx context.Context, readyFile string, exited <-chan error) (devInfo, error) {
	var info devInfo
	deadline := time.After(90 * time.Second)
	for {
		if b, err := os.ReadFile(readyFile); err == nil && json.Unmarshal(b, &info) == nil && info.Master != "" {
			return info, nil
		}
		select {
		case err := <-exited:
			return info, fmt.Errorf("cubemaster dev exited before it was ready: %v", err)
		case <-deadline:
			return info, errors.New("cubemaster dev was not ready after 90s")
		case <-ctx.Done():
			return info, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func getJSON(ctx context.Context, u string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Ret struct {
			Code int    `json:"ret_code"`
			Msg  string `json:"ret_msg"`
		} `json:"ret"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return fmt.Errorf("GET %s: %v: %s", u, err, b)
	}
	if env.Ret.Code != 200 {
		return fmt.Errorf("GET %s: ret_code %d: %s", u, env.Ret.Code, env.Ret.Msg)
	}
	return json.Unmarshal(b, out)
}

func fileSHA256(p string) (string, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil)), n, err
}

type phase struct {
	name string
	ms   float64
}

// phaseTimes reads how long each phase took from the services' own
// metrics: the data plane's build phases and the master's node RPCs
// (distribution and snapshot). Dev is fresh, so the sums are this build's.
func phaseTimes(ctx context.Context, info devInfo) ([]phase, error) {
	var out []phase
	build, err := scrape(ctx, info.TemplateCenter+"/metrics", "cube_template_build_phase_duration_seconds_sum", "phase")
	if err != nil {
		return nil, err
	}
	labels := map[string]string{"PULLING": "pull", "BUILDING_EXT4": "flatten + ext4", "GENERATING_JSON": "hash", "UPLOADING": "store"}
	order := []string{"PULLING", "UNPACKING", "BUILDING_EXT4", "GENERATING_JSON", "UPLOADING"}
	for _, k := range order {
		if v, ok := build[k]; ok {
			name := labels[k]
			if name == "" {
				name = strings.ToLower(k)
			}
			out = append(out, phase{name, v * 1000})
			delete(build, k)
		}
	}
	rest := make([]string, 0, len(build))
	for k := range build {
		rest = append(rest, k)
	}
	sort.Strings(rest)
	for _, k := range rest {
		out = append(out, phase{strings.ToLower(k), build[k] * 1000})
	}
	nodes, err := scrape(ctx, info.Master+"/metrics", "cube_template_node_operation_duration_seconds_sum", "op")
	if err != nil {
		return nil, err
	}
	for _, op := range []struct{ key, name string }{{"create_image", "distribute to node"}, {"app_snapshot", "snapshot on node"}} {
		if v, ok := nodes[op.key]; ok {
			out = append(out, phase{op.name, v * 1000})
		}
	}
	return out, nil
}

// scrape reads one labelled series family from a Prometheus text page.
func scrape(ctx context.Context, u, metric, label string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	re := regexp.MustCompile("^" + regexp.QuoteMeta(metric) + `\{` + label + `="([^"]+)"\} (\S+)$`)
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			if v, err := strconv.ParseFloat(m[2], 64); err == nil {
				out[m[1]] = v
			}
		}
	}
	return out, sc.Err()
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return "--- last lines of " + path + " ---\n" + strings.Join(lines, "\n")
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
