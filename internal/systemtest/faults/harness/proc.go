package harness

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proc is one child process. Its output goes to a log file that survives
// restarts (each start appends a marker line).
type Proc struct {
	Name string
	Bin  string
	Args []string
	Env  []string
	// Dir is the working directory ("" = the test's).
	Dir     string
	LogPath string

	// StderrPipe sends the process's stderr through a pipe the harness
	// copies into the log until CloseLogPipe closes its read end (a log
	// reader that went away: `serve | tee` stopped with Ctrl-C).
	StderrPipe bool

	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan struct{}
	logf  *os.File
	piper *os.File // the read end of StderrPipe's pipe
}

// CloseLogPipe closes the read end of the process's stderr pipe: its next
// write to stderr meets a closed pipe.
func (p *Proc) CloseLogPipe() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.piper != nil {
		p.piper.Close()
		p.piper = nil
	}
}

// Start starts the process; it fails the test if it cannot.
func (p *Proc) Start(t testing.TB) {
	t.Helper()
	if err := p.start(); err != nil {
		t.Fatalf("start %s: %v", p.Name, err)
	}
}

func (p *Proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s is already running (pid %d)", p.Name, p.cmd.Process.Pid)
	}
	if p.logf == nil {
		if err := os.MkdirAll(filepath.Dir(p.LogPath), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		p.logf = f
	}
	fmt.Fprintf(p.logf, "=== start %s %s\n", p.Name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Dir = p.Dir
	cmd.Stdout, cmd.Stderr = p.logf, p.logf
	var pw *os.File
	if p.StderrPipe {
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		p.piper, pw, cmd.Stderr = r, w, w
		go io.Copy(p.logf, r)
	}
	// A test binary that dies (a timeout panic) takes its children along;
	// nothing it started outlives it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err := cmd.Start()
	if pw != nil {
		pw.Close() // the child holds the write end
	}
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	p.cmd, p.done = cmd, done
	return nil
}

// PID is the running process's id, or 0.
func (p *Proc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Running reports whether the process was started and has not exited.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Stop ends the process with SIGTERM (SIGKILL after 20 s) and waits.
func (p *Proc) Stop() { p.end(syscall.SIGTERM, 20*time.Second) }

// Kill9 ends the process with SIGKILL, as a crash would, and waits.
func (p *Proc) Kill9() { p.end(syscall.SIGKILL, 0) }

func (p *Proc) end(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd, p.done = nil, nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	// Only this process, by its own pid.
	cmd.Process.Signal(sig)
	if grace > 0 {
		select {
		case <-done:
		case <-time.After(grace):
			cmd.Process.Kill()
			<-done
		}
	} else {
		<-done
	}
	if p.logf != nil {
		fmt.Fprintf(p.logf, "=== ended %s by %v %s\n", p.Name, sig, time.Now().Format(time.RFC3339Nano))
	}
}

// Close stops the process and closes its log.
func (p *Proc) Close() {
	p.Stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.logf != nil {
		p.logf.Close()
		p.logf = nil
	}
}

// Log returns the whole log.
func (p *Proc) Log() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

// Count counts the log lines containing s.
func (p *Proc) Count(s string) int { return strings.Count(p.Log(), s) }

// Tail is the end of the log, for failure reports.
func (p *Proc) Tail(n int) string {
	s := p.Log()
	if len(s) > n {
		return "...\n" + s[len(s)-n:]
	}
	return s
}

// OpenFiles counts the process's open file descriptors (/proc/PID/fd).
func OpenFiles(pid int) int {
	if pid == 0 {
		return -1
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}

// Children lists the pids whose parent is pid.
func Children(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var c int
		if _, err := fmt.Sscanf(e.Name(), "%d", &c); err != nil {
			continue
		}
		if ppid(c) == pid {
			out = append(out, c)
		}
	}
	return out
}

func ppid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	var state string
	var pp int
	if _, err := fmt.Sscanf(s[i+1:], " %s %d", &state, &pp); err != nil {
		return -1
	}
	return pp
}

// ProcessesOf lists the live processes whose executable is bin (by
// /proc/PID/exe), whoever their parent is.
func ProcessesOf(bin string) []int {
	want, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return nil
	}
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil {
			continue
		}
		if strings.TrimSuffix(exe, " (deleted)") == want {
			out = append(out, pid)
		}
	}
	return out
}
