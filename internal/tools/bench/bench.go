package bench

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Options configure a benchmark run (cmd/cubebench's flags).
type Options struct {
	Bin, Self, Work    string
	Registry, MySQLDSN string
	Rounds             int
	Builders           string
	Parts, Only        string
	Report             string
	Profile            bool
	// Baseline is a bin directory of an earlier build (templatecenter and
	// its ext4stream plugin) whose default (mkfs) and ext4stream builds are
	// timed in the same rounds, for before/after ratios.
	Baseline string
	// NodeLinkMbit is the rate of the link each node agent gets in the
	// links part: the services part again, each node agent in a network
	// namespace of its own, its link shaped to this many Mbit/s (links.go).
	NodeLinkMbit int
	// ChunkLinkMbit is the rate of each node agent's link in the
	// linkchunks part (linkchunks.go).
	ChunkLinkMbit int
}

// partNames are the parts -parts may name.
var partNames = []string{"builds", "chunks", "services", "links", "scale", "linkchunks"}

func (o Options) part(p string) bool { return contains(o.Parts, p) }

func contains(list, item string) bool {
	for _, x := range strings.Split(list, ",") {
		if strings.TrimSpace(x) == item {
			return true
		}
	}
	return false
}

// pipeline is one timed thing of the builds part.
type pipeline struct {
	name string
	run  func(round int, work string) (Run, error)
	// ours marks our own builds (the ratios' numerators).
	ours bool
	// follows marks a pipeline that must run right after the one before
	// it in the list (a warm build, on the cache its cold build left).
	follows bool
}

// roundOrder is the order the pipelines run in a round: the list's order
// in odd rounds, reversed in even ones, a pipeline that follows another
// kept right after it. On a VM whose host takes freed memory back, memory
// freed a moment ago costs a fraction of new memory, so a pipeline timed
// right after one that freed gigabytes runs faster than one timed after a
// light one; alternating the order gives each pipeline both neighbours.
func roundOrder(ps []pipeline, round int) []pipeline {
	if round%2 == 1 {
		return ps
	}
	var units [][]pipeline
	for _, p := range ps {
		if p.follows && len(units) > 0 {
			units[len(units)-1] = append(units[len(units)-1], p)
			continue
		}
		units = append(units, []pipeline{p})
	}
	out := make([]pipeline, 0, len(ps))
	for i := len(units) - 1; i >= 0; i-- {
		out = append(out, units[i]...)
	}
	return out
}

// Main runs the benchmark and writes the report to out.
func Main(o Options, out io.Writer, logf func(string, ...any)) error {
	for _, p := range strings.Split(o.Parts, ",") {
		if p = strings.TrimSpace(p); p != "" && !slices.Contains(partNames, p) {
			return fmt.Errorf("unknown part %q in -parts (known: %s)", p, strings.Join(partNames, ", "))
		}
	}
	if strings.TrimSpace(o.Parts) == "chunks" {
		// Alone, the chunks part needs no registry, binaries or speeds.
		fmt.Fprintf(out, "machine: %s\n", Machine())
		fmt.Fprintf(out, "load average at start: %s\n", Load())
		if err := chunksPart(o, out, logf); err != nil {
			return err
		}
		fmt.Fprintf(out, "\nload average at the end: %s\n", Load())
		return nil
	}
	if o.Registry == "" {
		return errors.New("no registry: set CUBE_TEST_REGISTRY or -registry (make bench starts one)")
	}
	if o.Rounds < 1 {
		o.Rounds = 1
	}
	for _, f := range []string{"templatecenter", "ext4stream"} {
		if _, err := os.Stat(filepath.Join(o.Bin, f)); err != nil {
			return fmt.Errorf("%s not built in %s (run make build): %w", f, o.Bin, err)
		}
	}
	fmt.Fprintf(out, "machine: %s\n", Machine())
	fmt.Fprintf(out, "load average at start: %s\n", Load())
	if err := os.MkdirAll(o.Work, 0o755); err != nil {
		return err
	}
	sp, err := MeasureSpeeds(o.Work, 1<<30)
	if err != nil {
		return fmt.Errorf("machine speeds: %w", err)
	}
	fmt.Fprintf(out, "speeds: %s\n\n", sp)
	warnLowSpace(o.Work, logf)
	if o.part("builds") {
		if err := builds(o, out, logf); err != nil {
			return err
		}
	}
	if o.part("chunks") {
		if err := chunksPart(o, out, logf); err != nil {
			return err
		}
	}
	if o.part("services") {
		loopback := o
		loopback.NodeLinkMbit = 0
		if err := services(loopback, out, logf); err != nil {
			return err
		}
	}
	if o.part("links") {
		if o.NodeLinkMbit <= 0 {
			return fmt.Errorf("the links part needs -node-link above 0 (Mbit/s), not %d", o.NodeLinkMbit)
		}
		if err := services(o, out, logf); err != nil {
			return err
		}
	}
	if o.part("scale") {
		if err := scalePart(o, out, logf); err != nil {
			return err
		}
	}
	if o.part("linkchunks") {
		if err := linkChunksPart(o, out, logf); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "\nload average at the end: %s\n", Load())
	return nil
}

// needFree is about what a whole run keeps on disk under -work at its
// peak: the services part's 8 node copies of the 1 GB artifact, then the
// 8 copies of its floor, beside the store and the layer cache; the builds
// part's layer caches (1.3 GB per builder) and upstream's unpacked image.
const needFree = 12 << 30

// warnLowSpace says so when -work has less room than a run needs: a disk
// close to full slows every pipeline (a run at 94 % full took a quarter
// longer) and the services part then fails writing its copies.
func warnLowSpace(work string, logf func(string, ...any)) {
	var st syscall.Statfs_t
	for d := work; syscall.Statfs(d, &st) != nil; d = filepath.Dir(d) { // -work may not exist yet
		if d == filepath.Dir(d) {
			return
		}
	}
	if free := int64(st.Bavail) * st.Bsize; free < needFree {
		logf("warning: %s has %.1f GB free; a whole run needs about %d GB there (free some space or pass -work DIR)",
			work, float64(free)/1e9, needFree>>30)
	}
}

func builds(o Options, out io.Writer, logf func(string, ...any)) error {
	img, err := MakeImage(filepath.Join(o.Work, "image"), filepath.Join(o.Bin, "templatecenter"), logf)
	if err != nil {
		return err
	}
	ref := o.Registry + "/bench/rootfs:" + strings.ReplaceAll(imageFormat, "/", "-")
	digest, err := img.Push(ref)
	if err != nil {
		return err
	}
	logf("pushed %s (%s)", ref, digest)
	e := &Env{Bin: o.Bin, Self: o.Self, Work: o.Work, Ref: ref, Registry: o.Registry, Image: img}
	for _, tool := range []string{"skopeo", "umoci", "mkfs.ext4", "e2fsck", "resize2fs", "tar", "pigz", "igzip"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is not installed (make bench installs it on Debian)", tool)
		}
	}

	var ps []pipeline
	for _, b := range strings.Split(o.Builders, ",") {
		b = strings.TrimSpace(b)
		if b == "" {
			continue
		}
		// NAME@builtin-gzip: gzip decoded in Go, not by igzip.
		var extra []string
		name := b
		for _, v := range [][2]string{
			{"@builtin-gzip", "CUBE_TEMPLATE_CENTER_GZIP_DECODER=builtin"},
		} {
			if base, ok := strings.CutSuffix(b, v[0]); ok {
				b, extra = base, append(extra, v[1])
			}
		}
		cache := ""
		ps = append(ps, pipeline{name: "ours " + name + " cold", ours: true, run: func(round int, work string) (Run, error) {
			// The cache outlives the run: the warm build right after uses it.
			cache = filepath.Join(o.Work, "cache-"+strings.NewReplacer(":", "-", "@", "-").Replace(name))
			os.RemoveAll(cache)
			env := extra
			if o.Profile && round == 1 && name == "ext4stream" {
				env = append(env, profileEnv(o.Work, "cold")...)
			}
			r, _, err := e.Ours(b, cache, "20Gi", filepath.Join(work, "rootfs.ext4"), env...)
			return r, err
		}})
		ps = append(ps, pipeline{name: "ours " + name + " warm", ours: true, follows: true, run: func(round int, work string) (Run, error) {
			env := extra
			if o.Profile && round == 1 && name == "ext4stream" {
				env = append(env, profileEnv(o.Work, "warm")...)
			}
			// Another writable layer size is another spec: a new artifact
			// over cached layers.
			r, _, err := e.Ours(b, cache, "21Gi", filepath.Join(work, "rootfs.ext4"), env...)
			os.RemoveAll(cache)
			return r, err
		}})
	}
	if o.Baseline != "" {
		be := &Env{Bin: o.Baseline, Self: o.Self, Work: o.Work, Ref: ref, Registry: o.Registry, Image: img}
		for _, b := range []string{"mkfs", "ext4stream"} {
			ps = append(ps, pipeline{name: "baseline " + b + " cold", run: func(_ int, work string) (Run, error) {
				cache := filepath.Join(work, "cache")
				r, _, err := be.Ours(b, cache, "20Gi", filepath.Join(work, "rootfs.ext4"))
				r.CPU = be.takeCPU()
				return r, err
			}})
		}
	}
	ps = append(ps,
		pipeline{name: "upstream dockerless (skopeo+umoci+mkfs -d+e2fsck+resize2fs -M)", run: func(_ int, work string) (Run, error) { return e.Dockerless(work) }},
		pipeline{name: "flatten (ggcr) + tar -x + mkfs.ext4 -d", run: func(_ int, work string) (Run, error) { return e.FlattenTarMkfs(work) }},
		pipeline{name: "decode bound (pigz -d, all layers at once)", run: func(int, string) (Run, error) { return e.DecodeBound("pigz") }},
		pipeline{name: "igzip bound (igzip -d, all layers at once)", run: func(int, string) (Run, error) { return e.DecodeBound("igzip") }},
	)
	if o.Only != "" {
		var keep []pipeline
		for _, p := range ps {
			for _, w := range strings.Split(o.Only, ",") {
				if w = strings.TrimSpace(w); w != "" && strings.Contains(p.name, w) {
					keep = append(keep, p)
					break
				}
			}
		}
		ps = keep
	}

	var runs []Run
	loads := make([]string, 0, o.Rounds)
	for round := 1; round <= o.Rounds; round++ {
		for _, p := range roundOrder(ps, round) {
			work, err := os.MkdirTemp(o.Work, "run-")
			if err != nil {
				return err
			}
			// Each pipeline starts with nothing left to write back from
			// the one before: a gigabyte of another pipeline's dirty
			// pages would otherwise be flushed on the cores and the disk
			// this one is timed on.
			syscall.Sync()
			e.takeCPU()
			r, err := p.run(round, work)
			if r.CPU == 0 {
				r.CPU = e.takeCPU()
			}
			os.RemoveAll(work)
			if err != nil {
				return fmt.Errorf("%s (round %d): %w", p.name, round, err)
			}
			r.Pipeline, r.Round = p.name, round
			runs = append(runs, r)
			logf("round %d: %-62s %6.2fs  cpu %6.2fs  peak %5s MiB  %s", round, p.name, r.Wall.Seconds(), r.CPU.Seconds(), MiB(r.PeakRSS), PhaseString(r.Phases))
		}
		loads = append(loads, Load())
	}
	writeBuilds(out, img, ref, o.Rounds, loads, Summarize(runs), ps)
	return nil
}

func profileEnv(work, what string) []string {
	dir := filepath.Join(work, "profiles")
	os.MkdirAll(dir, 0o755)
	return []string{
		"CUBE_TEMPLATE_CENTER_CPUPROFILE=" + filepath.Join(dir, what+".cpu.pprof"),
		"CUBE_TEMPLATE_CENTER_MEMPROFILE=" + filepath.Join(dir, what+".allocs.pprof"),
	}
}

func writeBuilds(out io.Writer, img *Image, ref string, rounds int, loads []string, sums []Summary, ps []pipeline) {
	fmt.Fprintf(out, "## Builds\n\n")
	fmt.Fprintf(out, "image %s: %d gzip layers, %d MB compressed, %d MB of file content, %d entries (flattened)\n", ref,
		len(img.Layers), totalCompressed(img)>>20, img.Content>>20, img.Entries)
	for i, l := range img.Layers {
		fmt.Fprintf(out, "  layer %d: %d MB gzip, %d MB tar, %d entries: %s\n", i, l.Size>>20, l.TarSize>>20, l.Entries, l.What)
	}
	fmt.Fprintf(out, "\n%d interleaved rounds; load average after each round: %s\n\n", rounds, strings.Join(loads, " | "))
	by := map[string]Summary{}
	for _, s := range sums {
		by[s.Pipeline] = s
	}
	var upstream, decode, igzip Summary
	for _, s := range sums {
		switch {
		case strings.HasPrefix(s.Pipeline, "upstream dockerless"):
			upstream = s
		case strings.HasPrefix(s.Pipeline, "decode bound"):
			decode = s
		case strings.HasPrefix(s.Pipeline, "igzip bound"):
			igzip = s
		}
	}
	t := Table{Header: []string{"pipeline", "median s", "runs (s)", "upstream / this", "this / decode bound", "this / igzip bound", "CPU s (median)", "peak RSS MiB", "image MiB", "phases (median s)"}}
	for _, s := range sums {
		var all []string
		for _, r := range s.Runs {
			all = append(all, fmt.Sprintf("%.2f", r.Wall.Seconds()))
		}
		row := []string{s.Pipeline, Secs(s.Median), strings.Join(all, " "), ratioCell(Ratio(upstream.Median, s.Median)), ratioCell(Ratio(s.Median, decode.Median)), ratioCell(Ratio(s.Median, igzip.Median)),
			Secs(s.CPU), MiB(s.PeakRSS), MiB(s.ImageBytes), PhaseString(s.Phases)}
		t.Rows = append(t.Rows, row)
	}
	t.Write(out)
	// The same ratios between each pipeline's fastest run: a slow round
	// (the machine busy, upstream's fsync-bound mode) moves medians, much
	// less the fastest runs.
	fmt.Fprintln(out)
	ft := Table{Header: []string{"pipeline, fastest run", "s", "upstream / this", "this / decode bound", "this / igzip bound"}}
	for _, s := range sums {
		ft.Rows = append(ft.Rows, []string{s.Pipeline, Secs(s.Fastest), ratioCell(Ratio(upstream.Fastest, s.Fastest)),
			ratioCell(Ratio(s.Fastest, decode.Fastest)), ratioCell(Ratio(s.Fastest, igzip.Fastest))})
	}
	ft.Write(out)
	// Warm over cold, per builder.
	fmt.Fprintln(out)
	for _, s := range sums {
		if cold, ok := strings.CutSuffix(s.Pipeline, " warm"); ok {
			if c, ok := by[cold+" cold"]; ok {
				fmt.Fprintf(out, "%s: warm / cold = %.2f (fastest runs: %.2f)\n", strings.TrimPrefix(cold, "ours "), Ratio(s.Median, c.Median), Ratio(s.Fastest, c.Fastest))
			}
		}
	}
}

func ratioCell(r float64) string {
	if r == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", r)
}

func totalCompressed(img *Image) int64 {
	var n int64
	for _, l := range img.Layers {
		n += l.Size
	}
	return n
}
