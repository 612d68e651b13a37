package soak

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/internal/systemtest/faults/harness"
)

func TestMain(m *testing.M) {
	code := m.Run()
	harness.Cleanup()
	os.Exit(code)
}

// DurationEnv sets how long the soak runs (a Go duration; default 90s,
// fitted to CI).
const DurationEnv = "CUBE_SOAK_DURATION"

// Slack is how far a process's open files and goroutines may end above
// their level after the warm-up cycle: connection pools and idle timers
// come and go, a leak per cycle does not stay within it.
const (
	fdSlack        = 12
	goroutineSlack = 25
)

// TestSoak: cycles of create → READY → redo → READY → delete, over a few
// images, until the duration is used up; after each cycle the system must
// hold nothing, and at the end no process may hold more open files or
// goroutines than after the warm-up (beyond a small slack).
func TestSoak(t *testing.T) {
	dur := 90 * time.Second
	if v := os.Getenv(DurationEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", DurationEnv, v, err)
		}
		dur = d
	}
	c := harness.Start(t, harness.Options{Masters: 1, DataPlanes: 2, Nodes: 2})
	mon := c.Watch(t)
	api := c.API()
	var refs []string
	for i := range 3 {
		ref, _ := c.PushImage(fmt.Sprintf("soak-%d", i), 512<<10)
		refs = append(refs, ref)
	}
	type sample struct {
		cycle     int
		at        time.Duration
		resources []harness.ProcFigures
		scratch   int64
	}
	var samples []sample
	start := time.Now()
	cycle := func(i int) {
		t.Helper()
		tpl := fmt.Sprintf("tpl-soak-%d", i%3)
		a := api.Create(tpl, refs[i%3])
		if !a.OK() {
			t.Fatalf("cycle %d create: %s", i, a)
		}
		if j := api.WaitJob(a.Job.JobID, 2*time.Minute); j.Job == nil || j.Job.Status != "READY" {
			t.Fatalf("cycle %d create: %s", i, j)
		}
		r := api.Redo(tpl)
		if !r.OK() {
			t.Fatalf("cycle %d redo: %s", i, r)
		}
		if j := api.WaitJob(r.Job.JobID, 2*time.Minute); j.Job == nil || j.Job.Status != "READY" {
			t.Fatalf("cycle %d redo: %s", i, j)
		}
		if d := api.Delete(tpl); !d.OK() {
			t.Fatalf("cycle %d delete: %s", i, d)
		}
		if !harness.WaitFor(time.Minute, func() bool { return len(c.Leftovers()) == 0 }) {
			t.Fatalf("cycle %d left behind: %v", i, c.Leftovers())
		}
	}
	n := 0
	for ; n == 0 || time.Since(start) < dur; n++ {
		cycle(n)
		if n == 0 || n%5 == 0 {
			c.CheckIdle(t, 30*time.Second)
			samples = append(samples, sample{cycle: n, at: time.Since(start), resources: c.Resources(), scratch: c.ScratchBytes()})
		}
	}
	c.CheckIdle(t, 30*time.Second)
	// Let idle connections and timers of the last cycle expire as they
	// would between any two cycles.
	time.Sleep(2 * time.Second)
	final := sample{cycle: n, at: time.Since(start), resources: c.Resources(), scratch: c.ScratchBytes()}
	samples = append(samples, final)
	mon.Stop()

	// The warm-up is five cycles: until then a replica may not have filled
	// its connection pools yet (the one that took no publish in the first
	// cycle opens its S3 connections later, up to its uploaders' and its
	// chunk collector's deleters' count), which is no leak. A leak grows
	// with every cycle after it.
	base := samples[0]
	if len(samples) > 2 {
		base = samples[1]
	}
	var table []string
	growth := map[string]any{}
	for i, b := range base.resources {
		f := final.resources[i]
		row := fmt.Sprintf("%-18s fds", b.Name)
		for _, s := range samples {
			row += fmt.Sprintf(" %3d", s.resources[i].OpenFiles)
		}
		if b.Goroutines >= 0 {
			row += "  goroutines"
			for _, s := range samples {
				row += fmt.Sprintf(" %3d", s.resources[i].Goroutines)
			}
		}
		table = append(table, row)
		growth[b.Name] = map[string]int{"fds_after_first_cycle": b.OpenFiles, "fds_at_end": f.OpenFiles,
			"goroutines_after_first_cycle": b.Goroutines, "goroutines_at_end": f.Goroutines}
		if f.OpenFiles > b.OpenFiles+fdSlack {
			t.Errorf("%s: %d open files after cycle %d, %d after %d cycles", b.Name, b.OpenFiles, base.cycle, f.OpenFiles, n)
		}
		if b.Goroutines >= 0 && f.Goroutines > b.Goroutines+goroutineSlack {
			t.Errorf("%s: %d goroutines after cycle %d, %d after %d cycles", b.Name, b.Goroutines, base.cycle, f.Goroutines, n)
		}
	}
	var cycles []string
	for _, s := range samples {
		cycles = append(cycles, fmt.Sprint(s.cycle))
	}
	t.Logf("soak: %d cycles in %v; samples after cycles %s\n%s", n, time.Since(start).Round(time.Second), strings.Join(cycles, ","), strings.Join(table, "\n"))
	rows := c.Rows()
	objs, ups := c.BucketObjects()
	keys := make([]string, 0, len(rows))
	for k, v := range rows {
		if v != 0 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if len(keys) > 0 || objs+ups > 0 || final.scratch != 0 {
		t.Errorf("after the soak: rows in %v, %d objects, %d uploads, %d scratch bytes", keys, objs, ups, final.scratch)
	}
	outcome := "pass"
	if t.Failed() {
		outcome = "FAIL"
	}
	harness.Record(t, harness.Figure{Suite: "soak", Name: "CreateRedoDeleteCycles", Outcome: outcome, Seconds: time.Since(start).Seconds(),
		Proves: "repeated create → redo → delete cycles leave no rows, objects, node files or scratch after each cycle, and no process gains open files or goroutines",
		Values: map[string]any{"cycles": n, "builds": n, "redos_reusing_the_artifact": n, "processes": growth, "scratch_bytes_at_end": final.scratch,
			"rows_at_end": 0, "objects_at_end": objs, "partial_layer_downloads": c.Partials()}})
}
