package deploy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// This file runs the deployment files' containers without a container
// engine: each container's command, as the image's user, in a directory
// that stands for its filesystem, with its volumes presented the way the
// platform presents them (fresh, root-owned, then handed to fsGroup by
// Kubernetes, or filled from the image by Docker). What a real container
// adds (namespaces, cgroups) does not change whether a process may write
// a directory, which is what these tests are about.

// image is what the Dockerfile's final stage says about the filesystem
// and the process: its user, environment, volumes and the directories it
// creates (with `install -d -o UID -g GID [-m MODE] PATH...`).
type image struct {
	uid, gid int
	env      map[string]string
	volumes  []string
	dirs     map[string]dirSpec
}

type dirSpec struct {
	uid, gid int
	mode     os.FileMode
}

// readImage parses the Dockerfile's final stage.
func readImage(t *testing.T) image {
	t.Helper()
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	// Join continuation lines, then keep the lines after the last FROM.
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	var stage []string
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(strings.ToUpper(line), "FROM ") {
			stage = nil
		}
		stage = append(stage, line)
	}
	img := image{uid: -1, gid: -1, env: map[string]string{}, dirs: map[string]dirSpec{}}
	for _, line := range stage {
		instr, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instr) {
		case "USER":
			u, g, _ := strings.Cut(rest, ":")
			img.uid, _ = strconv.Atoi(u)
			img.gid = img.uid
			if g != "" {
				img.gid, _ = strconv.Atoi(g)
			}
		case "ENV":
			k, v, _ := strings.Cut(rest, "=")
			img.env[k] = v
		case "VOLUME":
			for _, m := range regexp.MustCompile(`"([^"]+)"`).FindAllStringSubmatch(rest, -1) {
				img.volumes = append(img.volumes, m[1])
			}
		case "RUN":
			for _, cmd := range strings.Split(rest, "&&") {
				readInstallDirs(cmd, img.dirs)
			}
		}
	}
	if img.uid < 0 {
		t.Fatal("the Dockerfile's final stage sets no USER")
	}
	return img
}

// readInstallDirs records the directories an `install -d` command makes.
func readInstallDirs(cmd string, dirs map[string]dirSpec) {
	f := strings.Fields(cmd)
	if len(f) < 2 || f[0] != "install" || !strings.Contains(cmd, " -d") {
		return
	}
	spec := dirSpec{mode: 0o755}
	for i := 1; i < len(f); i++ {
		switch f[i] {
		case "-d":
		case "-o", "-g", "-m":
			if i+1 >= len(f) {
				return
			}
			base := 10
			if f[i] == "-m" {
				base = 8
			}
			n, _ := strconv.ParseInt(f[i+1], base, 32)
			switch f[i] {
			case "-o":
				spec.uid = int(n)
			case "-g":
				spec.gid = int(n)
			case "-m":
				spec.mode = os.FileMode(n)
			}
			i++
		default:
			dirs[f[i]] = spec
		}
	}
}

// sandbox stands for one container's filesystem: container path P is
// root+P; /usr/local/bin (the image's binaries) is bin.
type sandbox struct {
	t    *testing.T
	img  image
	root string
	bin  string
}

// newSandbox lays out the image: its /tmp (unless the root filesystem is
// read-only) and the directories the Dockerfile creates, with their owner
// and mode (read-only under a read-only root).
func newSandbox(t *testing.T, img image, bin, under string, readOnlyRoot bool) *sandbox {
	t.Helper()
	s := &sandbox{t: t, img: img, bin: bin, root: filepath.Join(under, "rootfs")}
	s.mkdir("/", 0, 0, 0o755)
	if !readOnlyRoot {
		s.mkdir("/tmp", 0, 0, 0o1777)
	}
	for p, d := range img.dirs {
		mode := d.mode
		if readOnlyRoot {
			mode &^= 0o222
		}
		s.mkdir(p, d.uid, d.gid, mode)
	}
	return s
}

// mkdir makes a directory (its missing parents root's, 0755) with an
// owner and a mode.
func (s *sandbox) mkdir(p string, uid, gid int, mode os.FileMode) string {
	s.t.Helper()
	h := s.path(p)
	if err := os.MkdirAll(h, 0o755); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Chown(h, uid, gid); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Chmod(h, modeBits(mode)); err != nil {
		s.t.Fatal(err)
	}
	return h
}

// modeBits turns a Unix mode (0o2775, 0o1777) into os.FileMode bits:
// os.Chmod takes setgid and sticky as os.ModeSetgid and os.ModeSticky.
func modeBits(m os.FileMode) os.FileMode {
	out := m & 0o777
	if m&0o2000 != 0 {
		out |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		out |= os.ModeSticky
	}
	return out
}

// path maps a container path onto the host.
func (s *sandbox) path(p string) string {
	if rest, ok := strings.CutPrefix(p, "/usr/local/bin"); ok && (rest == "" || rest[0] == '/') {
		return s.bin + rest
	}
	return filepath.Join(s.root, p)
}

// kubeVolume presents a Kubernetes volume at p: a fresh directory, root's
// and 0755 as a provisioner creates it (what a pod sees without fsGroup),
// handed to fsGroup (group-owned, group-writable, setgid) when the pod
// sets one, as the kubelet does. shared, when set, is the volume's
// directory another pod mounts too (a claim).
func (s *sandbox) kubeVolume(p string, fsGroup int, shared string) {
	s.t.Helper()
	h := s.path(p)
	if err := os.RemoveAll(h); err != nil {
		s.t.Fatal(err)
	}
	if shared == "" {
		shared = h
	}
	if _, err := os.Stat(shared); os.IsNotExist(err) {
		if err := os.MkdirAll(shared, 0o755); err != nil {
			s.t.Fatal(err)
		}
		if err := os.Chown(shared, 0, 0); err != nil {
			s.t.Fatal(err)
		}
		if fsGroup >= 0 {
			if err := os.Chown(shared, 0, fsGroup); err != nil {
				s.t.Fatal(err)
			}
			if err := os.Chmod(shared, 0o775|os.ModeSetgid); err != nil {
				s.t.Fatal(err)
			}
		}
	}
	if shared != h {
		if err := os.MkdirAll(filepath.Dir(h), 0o755); err != nil {
			s.t.Fatal(err)
		}
		if err := os.Symlink(shared, h); err != nil {
			s.t.Fatal(err)
		}
	}
}

// dockerVolume presents a fresh Docker volume (named or the image's
// anonymous one) at p: Docker fills an empty volume from the image's
// directory at p, owner and mode included; where the image has none, the
// mount point is root's.
func (s *sandbox) dockerVolume(p string) {
	s.t.Helper()
	if d, ok := s.img.dirs[p]; ok {
		s.mkdir(p, d.uid, d.gid, d.mode)
		return
	}
	s.mkdir(p, 0, 0, 0o755)
}

// creds are the ids a container's process runs with.
type creds struct {
	uid, gid int
	groups   []int
}

// proc is a started container command.
type proc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	log  bytes.Buffer
	done chan struct{}
	err  error
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.Write(b)
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// absPath matches a container path in an argument or a variable.
var absPath = regexp.MustCompile(`^/[^\s]*$`)

// start runs argv (argv[0] found in /usr/local/bin) with env, every
// absolute path in either mapped into the sandbox, as c.
func (s *sandbox) start(name string, argv []string, env map[string]string, c creds) *proc {
	s.t.Helper()
	args := make([]string, len(argv))
	for i, a := range argv {
		if absPath.MatchString(a) {
			a = s.path(a)
		}
		args[i] = a
	}
	merged := map[string]string{}
	for k, v := range s.img.env {
		merged[k] = v
	}
	for k, v := range env {
		merged[k] = v
	}
	// What the runtime gives a process without a passwd home of its own
	// (nobody's is /nonexistent), and the image's /tmp.
	merged["HOME"] = "/nonexistent"
	merged["TMPDIR"] = "/tmp"
	merged["PATH"] = "/usr/local/bin:/usr/bin:/bin"
	var environ []string
	for k, v := range merged {
		if absPath.MatchString(v) && k != "PATH" {
			v = s.path(v)
		}
		environ = append(environ, k+"="+v)
	}
	environ = append(environ, "PATH="+s.bin+":/usr/bin:/bin")
	p := &proc{name: name, done: make(chan struct{})}
	p.cmd = exec.Command(filepath.Join(s.bin, args[0]), args[1:]...)
	p.cmd.Env = environ
	p.cmd.Dir = s.root
	p.cmd.Stdout, p.cmd.Stderr = p, p
	groups := make([]uint32, len(c.groups))
	for i, g := range c.groups {
		groups[i] = uint32(g)
	}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(c.uid), Gid: uint32(c.gid), Groups: groups}}
	if err := p.cmd.Start(); err != nil {
		s.t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	s.t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(30 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
		if s.t.Failed() {
			s.t.Logf("---- %s (%s) ----\n%s", name, strings.Join(argv, " "), tail(p.output(), 4000))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// waitHTTP polls url until it answers 200, failing when one of procs
// exits first (a refusal to start is the finding, not a timeout) or after
// a generous bound on a loaded machine. It returns the body.
func waitHTTP(t *testing.T, url string, procs ...*proc) string {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		for _, p := range procs {
			select {
			case <-p.done:
				t.Fatalf("%s exited (%v) before %s answered 200:\n%s", p.name, p.err, url, tail(p.output(), 3000))
			default:
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<10))
			resp.Body.Close()
			last = fmt.Sprintf("%s %s", resp.Status, b)
			if resp.StatusCode == http.StatusOK {
				cancel()
				return string(b)
			}
		} else {
			last = err.Error()
		}
		cancel()
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s never answered 200 (last: %s)", url, last)
	return ""
}

// freeAddr reserves a loopback port and returns it.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// containerBinaries are the image's binaries, where the image's user may
// run them: CUBE_TEST_BIN_DIR's (make build) copied, or built.
func containerBinaries(t *testing.T, names ...string) string {
	t.Helper()
	dir := testenv.SharedTempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := os.Getenv("CUBE_TEST_BIN_DIR")
	for _, n := range names {
		out := filepath.Join(dir, n)
		if src != "" {
			b, err := os.ReadFile(filepath.Join(src, n))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(out, b, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if b, err := exec.Command("go", "build", "-o", out, "github.com/cubesandbox/templatecenter/apps/"+n).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", n, err, b)
		}
	}
	return dir
}
