package faults

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/internal/systemtest/faults/harness"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

func (w *world) scratchScenarios(t *testing.T) {
	c := w.c
	w.scenario(t, "ScratchDiskFull", "a data-plane replica whose work directory (a 24 MiB tmpfs) fills up mid-build fails that build cleanly, removes its scratch, stays healthy and builds a smaller image next (I5, I6)", func(t *testing.T) map[string]any {
		testenv.Tool(t, "mount")
		dir := filepath.Join(c.Dir, "small-scratch")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=24m,mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
			if testenv.Required() || !strings.Contains(string(out), "permitted") {
				t.Fatalf("mount tmpfs: %v %s", err, out)
			}
			t.Skipf("mount tmpfs: %v %s", err, out)
		}
		const victim = 1
		oldEnv, oldDir := c.TCs[victim].Env, c.TCDirs[victim]
		restore := func() {
			c.TCLB.Pin(-1)
			c.TCs[victim].Stop()
			c.TCs[victim].Env, c.TCDirs[victim] = oldEnv, oldDir
			exec.Command("umount", dir).Run()
			c.StartTC(victim)
		}
		defer restore()
		c.TCs[victim].Stop()
		c.TCs[victim].Env = append(append([]string(nil), oldEnv...), "CUBE_TEMPLATE_CENTER_ARTIFACT_WORK_DIR="+dir)
		c.TCDirs[victim] = dir
		c.StartTC(victim)
		c.TCLB.Pin(victim)

		big, _ := c.PushImage("scratch-big", 14<<20)
		j := w.mustFail(t, w.create(t, "tpl-scratch-big", big), 2*time.Minute, "no space left")
		if ds, _ := filepath.Glob(filepath.Join(dir, "build-*")); len(ds) > 0 {
			t.Errorf("scratch left after the failed build: %v", ds)
		}
		used := harness.DirBytes(dir)
		harness.WaitHTTP(t, c.TCURLs[victim]+"/health", 10*time.Second)
		small, _ := c.PushImage("scratch-small", 64<<10)
		w.mustReady(t, w.create(t, "tpl-scratch-small", small))
		if c.TCLB.LastBuild() != victim {
			t.Errorf("the small build went to replica %d", c.TCLB.LastBuild())
		}
		return map[string]any{"error": short(j.ErrorMessage), "bytes_left_in_work_dir": used}
	})
}
