package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The scale part (-parts scale) measures how a cold build grows with the
// image: `templatecenter build` (the default builder, an empty layer
// cache, under the RSS helper like the builds part) of the benchmark image
// and of a big one, the benchmark image plus two generated layers shaped
// like a Rust toolchain (synth.go) that make it about 4 GiB of content and
// 150,000 entries. From the two it derives the memory a build needs per
// tree entry (the slope of the peak RSS between the images) and whether
// the time grows linearly (time per entry of the big image against the
// small one's).
const (
	scaleFormat = "cube-bench-scale/2"
	// scaleContent is the big image's file content in all (the benchmark
	// image's and the generated layers').
	scaleContent = 4 << 30
	// scaleSources is how many source files the generated tree holds:
	// with their directories and the benchmark image's ~28k entries,
	// about 150,000 entries.
	scaleSources = 108_000
	// scaleSeed seeds the generated layers: another seed is another image.
	scaleSeed = 33
	// scaleNeedFree is what the part keeps on disk at its peak: the big
	// image's layers (~2 GB), its layer cache and its ext4 (~4.5 GB),
	// beside the registry's copy if it is on the same disk.
	scaleNeedFree = 10 << 30
)

// MakeScaleImage writes the big image's generated layers into dir (or
// reuses them when dir holds those made by the same rules over the same
// benchmark image) and returns the image: base's layers where they are,
// then the generated ones.
func MakeScaleImage(dir string, base *Image, logf func(string, ...any)) (*Image, error) {
	manifest := filepath.Join(dir, "image.json")
	if img, err := loadScaleImage(manifest, base); err == nil {
		img.Dir = dir
		logf("reusing the scale part's big image in %s (%d layers, %d MB, ~%d entries)", dir, len(img.Layers), img.Content>>20, img.Entries)
		return img, nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	start := time.Now()
	img := &Image{Format: scaleFormat, Dir: dir}
	for _, l := range base.Layers {
		l.File = base.path(l)
		img.Layers = append(img.Layers, l)
	}
	// The base's totals are those of its flattened tree; the generated
	// layers hide nothing, so theirs add up.
	img.Entries, img.Content = base.Entries, base.Content
	src, _, err := writeLayer(filepath.Join(dir, "rust-src.tar.gz"), func(w *layerWriter) error {
		return w.addSources("opt/rust/lib/rustlib/src/rust/library", scaleSeed, scaleSources)
	})
	if err != nil {
		return nil, err
	}
	src.What = fmt.Sprintf("generated: %d Rust-like source files in deep trees", scaleSources)
	img.add(src)
	logf("scale: layer %d: %s: %d entries, %d MB, %d MB gzip", len(img.Layers)-1, src.What, src.Entries, src.Content>>20, src.Size>>20)
	bins := max(int64(scaleContent)-img.Content, 64<<20)
	bin, _, err := writeLayer(filepath.Join(dir, "rust-bin.tar.gz"), func(w *layerWriter) error {
		return w.addBinaries("opt/rust", scaleSeed, bins)
	})
	if err != nil {
		return nil, err
	}
	bin.What = "generated: large Rust-like binaries and libraries (8-256 MiB each)"
	img.add(bin)
	logf("scale: layer %d: %s: %d entries, %d MB, %d MB gzip", len(img.Layers)-1, bin.What, bin.Entries, bin.Content>>20, bin.Size>>20)
	b, _ := json.MarshalIndent(img, "", "  ")
	if err := os.WriteFile(manifest, b, 0o644); err != nil {
		return nil, err
	}
	logf("scale: big image made in %.1fs: %d layers, %d MB content, ~%d entries", time.Since(start).Seconds(), len(img.Layers), img.Content>>20, img.Entries)
	return img, nil
}

func loadScaleImage(manifest string, base *Image) (*Image, error) {
	b, err := os.ReadFile(manifest)
	if err != nil {
		return nil, err
	}
	var img Image
	if err := json.Unmarshal(b, &img); err != nil {
		return nil, err
	}
	if img.Format != scaleFormat || len(img.Layers) != len(base.Layers)+2 {
		return nil, fmt.Errorf("stale scale image")
	}
	img.Dir = filepath.Dir(manifest)
	for i, l := range img.Layers {
		if i < len(base.Layers) && l.Digest != base.Layers[i].Digest {
			return nil, fmt.Errorf("the benchmark image changed")
		}
		if st, err := os.Stat(img.path(l)); err != nil || st.Size() != l.Size {
			return nil, fmt.Errorf("layer %s missing", l.File)
		}
	}
	return &img, nil
}

// ScaleResult is one image's cold builds in the scale part.
type ScaleResult struct {
	Image        string
	Entries      int   // from the build's --json
	ContentBytes int64 // file content of the flattened tree
	ImageBytes   int64 // the ext4 written
	Wall, CPU    time.Duration
	PeakRSS      int64 // median over the rounds
	// HeapPeak and HeapLive are the Go heap's largest size at the end of a
	// collection and its largest live size after one (GODEBUG=gctrace=1),
	// medians over the rounds; 0 when the build printed no trace.
	HeapPeak, HeapLive int64
	Runs               []Run
}

// summarizeScale gives the medians of one image's runs.
func summarizeScale(image string, entries int, content int64, runs []Run) ScaleResult {
	r := ScaleResult{Image: image, Entries: entries, ContentBytes: content, Runs: runs}
	var walls, cpus []time.Duration
	var rss, hp, hl []int64
	for _, x := range runs {
		walls, cpus = append(walls, x.Wall), append(cpus, x.CPU)
		rss, hp, hl = append(rss, x.PeakRSS), append(hp, x.HeapPeak), append(hl, x.HeapLive)
		r.ImageBytes = max(r.ImageBytes, x.ImageBytes)
	}
	r.Wall, r.CPU = Median(walls), Median(cpus)
	r.PeakRSS, r.HeapPeak, r.HeapLive = medianInt(rss), medianInt(hp), medianInt(hl)
	return r
}

func medianInt(v []int64) int64 {
	ds := make([]time.Duration, len(v))
	for i, x := range v {
		ds[i] = time.Duration(x)
	}
	return int64(Median(ds))
}

// PerEntry is the slope between two points: how many more units (bytes)
// each additional entry costs from small to big. 0 when the entries do not
// grow.
func PerEntry(small, big int64, entriesSmall, entriesBig int) float64 {
	if entriesBig <= entriesSmall {
		return 0
	}
	return float64(big-small) / float64(entriesBig-entriesSmall)
}

// Linearity is the big image's time per entry over the small one's: 1
// when the time grows in proportion to the entries, above 1 when faster.
func Linearity(small, big time.Duration, entriesSmall, entriesBig int) float64 {
	if small <= 0 || entriesSmall <= 0 || entriesBig <= 0 {
		return 0
	}
	return (big.Seconds() / float64(entriesBig)) / (small.Seconds() / float64(entriesSmall))
}

// scaleTables renders the scale part's results: a row per image, then the
// slopes between the first (small) and the last (big).
func scaleTables(rs []ScaleResult) (Table, Table) {
	t := Table{Header: []string{"image", "entries", "content MB", "ext4 MB", "wall s (median)", "CPU s (median)", "peak RSS MiB (median)", "Go heap peak / live MiB (gctrace, median)", "runs: wall s / peak RSS MiB"}}
	for _, r := range rs {
		var runs []string
		for _, x := range r.Runs {
			runs = append(runs, fmt.Sprintf("%.2f / %s", x.Wall.Seconds(), MiB(x.PeakRSS)))
		}
		t.Rows = append(t.Rows, []string{r.Image, strconv.Itoa(r.Entries), fmt.Sprintf("%.0f", mb(r.ContentBytes)), fmt.Sprintf("%.0f", mb(r.ImageBytes)),
			Secs(r.Wall), Secs(r.CPU), MiB(r.PeakRSS), MiB(r.HeapPeak) + " / " + MiB(r.HeapLive), strings.Join(runs, ", ")})
	}
	s := Table{Header: []string{"big against small", "value"}}
	if len(rs) < 2 {
		return t, s
	}
	a, b := rs[0], rs[len(rs)-1]
	s.Rows = append(s.Rows,
		[]string{"peak RSS per added entry (bytes): (RSS_big - RSS_small) / (entries_big - entries_small)", fmt.Sprintf("%.0f", PerEntry(a.PeakRSS, b.PeakRSS, a.Entries, b.Entries))},
		[]string{"peak RSS per entry of the big image (bytes)", fmt.Sprintf("%.0f", float64(b.PeakRSS)/float64(max(b.Entries, 1)))},
		[]string{"Go heap live per added entry (bytes, gctrace)", perEntryCell(a.HeapLive, b.HeapLive, a.Entries, b.Entries)},
		[]string{"wall time per entry, big / small (1.00: linear)", fmt.Sprintf("%.2f", Linearity(a.Wall, b.Wall, a.Entries, b.Entries))},
		[]string{"CPU time per entry, big / small", fmt.Sprintf("%.2f", Linearity(a.CPU, b.CPU, a.Entries, b.Entries))},
		[]string{"wall time per content byte, big / small", fmt.Sprintf("%.2f", Linearity(a.Wall, b.Wall, int(a.ContentBytes>>10), int(b.ContentBytes>>10)))},
	)
	return t, s
}

func perEntryCell(small, big int64, es, eb int) string {
	if small <= 0 || big <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", PerEntry(small, big, es, eb))
}

// gcLine matches the heap sizes of a gctrace line: "4->5->1 MB" (at the
// start of the collection, at its end, live after it; MiB).
var gcLine = regexp.MustCompile(`(?m)^gc \d+ @.* (\d+)->(\d+)->(\d+) MB`)

// ParseGCTrace returns the largest heap at the end of a collection and the
// largest live heap after one, in bytes, from GODEBUG=gctrace=1 output.
func ParseGCTrace(stderr string) (peak, live int64) {
	for _, m := range gcLine.FindAllStringSubmatch(stderr, -1) {
		end, _ := strconv.ParseInt(m[2], 10, 64)
		after, _ := strconv.ParseInt(m[3], 10, 64)
		peak, live = max(peak, end<<20), max(live, after<<20)
	}
	return peak, live
}

// freeSpace is the bytes available under dir (or its nearest existing
// parent), -1 when unknown.
func freeSpace(dir string) int64 {
	var st syscall.Statfs_t
	for d := dir; syscall.Statfs(d, &st) != nil; d = filepath.Dir(d) {
		if d == filepath.Dir(d) {
			return -1
		}
	}
	return int64(st.Bavail) * st.Bsize
}

func scalePart(o Options, out io.Writer, logf func(string, ...any)) error {
	if free := freeSpace(o.Work); free >= 0 && free < scaleNeedFree {
		logf("warning: %s has %.1f GB free; the scale part needs about %d GB there (its big image, layer cache and ext4)",
			o.Work, float64(free)/1e9, scaleNeedFree>>30)
	}
	small, err := MakeImage(filepath.Join(o.Work, "image"), filepath.Join(o.Bin, "templatecenter"), logf)
	if err != nil {
		return err
	}
	big, err := MakeScaleImage(filepath.Join(o.Work, "image-scale"), small, logf)
	if err != nil {
		return err
	}
	tag := strings.ReplaceAll(imageFormat, "/", "-")
	refs := []string{o.Registry + "/bench/rootfs:" + tag, o.Registry + "/bench/rootfs:" + tag + "-" + strings.ReplaceAll(scaleFormat, "/", "-")}
	imgs := []*Image{small, big}
	envs := make([]*Env, 2)
	for i, img := range imgs {
		start := time.Now()
		digest, err := img.Push(refs[i])
		if err != nil {
			return err
		}
		logf("pushed %s (%s) in %.1fs", refs[i], digest, time.Since(start).Seconds())
		envs[i] = &Env{Bin: o.Bin, Self: o.Self, Work: o.Work, Ref: refs[i], Registry: o.Registry, Image: img}
	}
	rounds := max(o.Rounds, 2)
	runs := make([][]Run, 2)
	entries := make([]int, 2)
	content := make([]int64, 2)
	names := []string{"bench image", "bench image + Rust-like layers"}
	for round := 1; round <= rounds; round++ {
		order := []int{0, 1}
		if round%2 == 0 {
			order = []int{1, 0}
		}
		for _, i := range order {
			work, err := os.MkdirTemp(o.Work, "scale-")
			if err != nil {
				return err
			}
			syscall.Sync()
			e := envs[i]
			e.takeCPU()
			r, res, err := e.Ours("ext4stream", filepath.Join(work, "cache"), "20Gi", filepath.Join(work, "rootfs.ext4"), "GODEBUG=gctrace=1")
			r.CPU = e.takeCPU()
			os.RemoveAll(work)
			if err != nil {
				return fmt.Errorf("scale: %s (round %d): %w", names[i], round, err)
			}
			r.Pipeline, r.Round = names[i], round
			runs[i] = append(runs[i], r)
			entries[i], content[i] = res.Entries, res.ContentBytes
			logf("scale round %d: %-32s %d entries %6.2fs  cpu %6.2fs  peak %5s MiB  Go heap %s / %s MiB  %s", round, names[i], res.Entries,
				r.Wall.Seconds(), r.CPU.Seconds(), MiB(r.PeakRSS), MiB(r.HeapPeak), MiB(r.HeapLive), PhaseString(r.Phases))
		}
	}
	var rs []ScaleResult
	for i := range imgs {
		rs = append(rs, summarizeScale(names[i], entries[i], content[i], runs[i]))
	}
	fmt.Fprintf(out, "\n## Scale: a cold build of the bench image and of a ~4 GiB one\n\n")
	fmt.Fprintf(out, "`templatecenter build --builder ext4stream` (the default), an empty layer cache each run, under the RSS helper, GODEBUG=gctrace=1; %d rounds, the images alternating. The big image: %s plus\n", rounds, refs[0])
	for _, l := range big.Layers[len(small.Layers):] {
		fmt.Fprintf(out, "  %s: %d entries, %d MB, %d MB gzip\n", l.What, l.Entries, l.Content>>20, l.Size>>20)
	}
	fmt.Fprintln(out)
	t, s := scaleTables(rs)
	t.Write(out)
	fmt.Fprintln(out)
	s.Write(out)
	return nil
}
