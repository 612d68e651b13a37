//go:build unix

package pipeline

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/ports"
)

// stageChildEnv makes the test binary, run again, the build that is
// killed in TestKilledBuildLeavesNothingBesideOut.
const stageChildEnv = "CUBE_TEST_PIPELINE_KILLED_BUILD"

// A build killed while its builder writes (SIGKILL: no deferred cleanup
// runs) leaves its temporary image in the stage directory beside the
// output; the next build beside the same output removes it, so a CI job
// that times out does not leak a gigabyte per run.
func TestKilledBuildLeavesNothingBesideOut(t *testing.T) {
	if out := os.Getenv(stageChildEnv); out != "" {
		runKilledBuild(t, out)
		return
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "rootfs.ext4")
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledBuildLeavesNothingBesideOut$")
	cmd.Env = append(os.Environ(), stageChildEnv+"="+out, "CUBE_TEST_PIPELINE_READY="+ready)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal("the child build never reached its builder")
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if names(t, dir) == nil {
		t.Fatal("the killed build left nothing: the test proves nothing")
	}
	// Past the grace a stage gets for the instant between being made
	// and being held.
	old := time.Now().Add(-2 * StageGrace)
	for _, n := range names(t, dir) {
		if err := os.Chtimes(filepath.Join(dir, n), old, old); err != nil {
			t.Fatal(err)
		}
	}

	f := newFixture(t)
	if _, err := f.pipeline.Run(context.Background(), Input{Image: ports.ImageRequest{Ref: "reg.example/app:v1"}, Request: request(), OutPath: out}, nil); err != nil {
		t.Fatal(err)
	}
	if got := names(t, dir); !slices.Equal(got, []string{"rootfs.ext4"}) {
		t.Errorf("after the next build the output's directory holds %q, want only rootfs.ext4", got)
	}
}

// runKilledBuild is the child: its builder writes a temporary file beside
// the path it is given, as the ext4 builders do, says so, and waits to be
// killed.
func runKilledBuild(t *testing.T, out string) {
	f := newFixture(t)
	f.builder.BuildFunc = func(ctx context.Context, spec ports.BuildSpec, tree ports.Tree) (ports.BuildResult, error) {
		tmp := filepath.Join(filepath.Dir(spec.OutPath), "."+filepath.Base(spec.OutPath)+".tmp-1")
		if err := os.WriteFile(tmp, make([]byte, 1<<20), 0o600); err != nil {
			return ports.BuildResult{}, err
		}
		if err := os.WriteFile(os.Getenv("CUBE_TEST_PIPELINE_READY"), nil, 0o600); err != nil {
			return ports.BuildResult{}, err
		}
		select {}
	}
	_, err := f.pipeline.Run(context.Background(), Input{Image: ports.ImageRequest{Ref: "reg.example/app:v1"}, Request: request(), OutPath: out}, nil)
	t.Fatalf("the child build returned (%v) instead of being killed", err)
}

// SweepStages removes a dead build's stage, never one a live process
// holds, one just made, a file, or a directory of another name.
func TestSweepStages(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-2 * StageGrace)
	tests := []struct {
		name      string
		dir, held bool
		mod       time.Time
		kept      bool
	}{
		{OutStagePrefix + "dead", true, false, old, false},
		{OutStagePrefix + "live", true, true, old, true},
		{OutStagePrefix + "fresh", true, false, time.Now(), true},
		{OutStagePrefix + "file", false, false, old, true},
		{"other", true, false, old, true},
	}
	for _, tt := range tests {
		p := filepath.Join(dir, tt.name)
		if !tt.dir {
			if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		} else {
			if err := os.Mkdir(p, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(p, ".rootfs.ext4.tmp-1"), make([]byte, 4096), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if tt.held {
			release, err := lockScratch(p)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(release)
		}
		if err := os.Chtimes(p, tt.mod, tt.mod); err != nil {
			t.Fatal(err)
		}
	}
	n, err := SweepStages(dir, OutStagePrefix, time.Now())
	if err != nil || n != 1 {
		t.Fatalf("SweepStages = %d, %v; want 1, nil", n, err)
	}
	var want []string
	for _, tt := range tests {
		if tt.kept {
			want = append(want, tt.name)
		}
	}
	slices.Sort(want)
	if got := names(t, dir); !slices.Equal(got, want) {
		t.Errorf("after the sweep the directory holds %q, want %q", got, want)
	}
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	return got
}

// A sweep (SweepStages, the data plane's SweepScratch) probes a directory
// by taking its flock for an instant. A build that makes its directory
// during such a probe must still end up holding it: failing there fails
// the build (scratch) or, worse, leaves its stage unheld for a later sweep
// to remove while the build writes in it (NewStage ignores the error).
func TestLockScratchWaitsOutAProbe(t *testing.T) {
	dir := t.TempDir()
	probe, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(probe.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond) // the probe is brief, but not over yet
		probe.Close()
	}()
	release, err := lockScratch(dir)
	if err != nil {
		t.Fatalf("lockScratch during a probe: %v", err)
	}
	defer release()
	if held, known, err := ScratchHeld(dir); err != nil || !known || !held {
		t.Fatalf("ScratchHeld = %v, %v, %v; want held", held, known, err)
	}
}

// A stage this build cannot hold is refused (a sweep could remove it
// under the build), unless the file system has no flock at all (then no
// sweep removes it either).
func TestNewStageMustHoldItsDirectory(t *testing.T) {
	for _, tt := range []struct {
		name    string
		err     error
		wantErr bool
	}{
		{"held", nil, false},
		{"no flock here", syscall.ENOLCK, false},
		{"flock not supported", syscall.EOPNOTSUPP, false},
		{"cannot open it", syscall.EMFILE, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			defer func(l func(string) (func(), error)) { lockStage = l }(lockStage)
			lockStage = func(dir string) (func(), error) {
				if tt.err != nil {
					return nil, tt.err
				}
				return lockScratch(dir)
			}
			dir := t.TempDir()
			out := filepath.Join(dir, "rootfs.ext4")
			st, err := NewStage(out, OutStagePrefix)
			if tt.wantErr {
				if err == nil || !errors.Is(err, tt.err) {
					t.Fatalf("NewStage = %v, want an error wrapping %v", err, tt.err)
				}
				if got := names(t, dir); got != nil {
					t.Errorf("a refused stage left %q", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(st.Path(out), []byte("img"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := st.Publish(out); err != nil {
				t.Fatal(err)
			}
			st.Remove()
			if got := names(t, dir); !slices.Equal(got, []string{"rootfs.ext4"}) {
				t.Errorf("after Publish and Remove the directory holds %q", got)
			}
		})
	}
}
