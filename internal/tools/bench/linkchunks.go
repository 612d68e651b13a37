package bench

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The links-chunks part (-parts linkchunks) measures a rebuild on 8 nodes
// behind rate-limited links (links.go), with the data plane's chunks on
// (the default) and off (CUBE_TEMPLATE_CENTER_CHUNKS=false: no chunk index
// is published, so the node agents download whole files): template A, the
// benchmark image with a 30 MB app layer on top, is sent to all 8 nodes;
// then template B, the same base with another 30 MB app layer instead (the
// chunks part's scenario (a)). For B it gives the time from create to each
// node's READY and the bytes each node's link carried (the host side of
// its veth pair), against the artifact's size and its time over one link
// and against the floor of 8 copies on this one machine (copyBound): with
// every node on the same cores and disk, a node assembling from its own
// chunks still hashes and writes the whole file.

// LinkChunksRun is one mode's measurements.
type LinkChunksRun struct {
	Chunks bool
	// A: the first template, to nodes that hold nothing.
	AReady time.Duration
	ARecv  []int64 // bytes per node
	// B: the rebuild.
	BBuilt     time.Duration
	BNodeReady []time.Duration // since create, one a node
	BRecv      []int64
	BArtifact  int64
	// Floor is copyBound for B's artifact (8 sha256 passes and 8 direct
	// writes at once, no network): what 8 nodes on this one machine must
	// do at the least with it, chunks or not. Measured in the last mode
	// only; 0 in the others.
	Floor time.Duration
}

func linkChunksTable(runs []LinkChunksRun, mbit int) Table {
	t := Table{Header: []string{"measure"}}
	for _, r := range runs {
		t.Header = append(t.Header, map[bool]string{true: "chunks on", false: "chunks off"}[r.Chunks])
	}
	row := func(what string, cell func(r LinkChunksRun) string) {
		cells := []string{what}
		for _, r := range runs {
			cells = append(cells, cell(r))
		}
		t.Rows = append(t.Rows, cells)
	}
	row("A (bench image + app 1, nodes hold nothing): create -> READY on 8 nodes (s)", func(r LinkChunksRun) string { return Secs(r.AReady) })
	row("A: MB received per node, median / max", func(r LinkChunksRun) string { return mbPair(r.ARecv) })
	row("B (app 2 instead): artifact MB", func(r LinkChunksRun) string { return fmt.Sprintf("%.0f", mb(r.BArtifact)) })
	row(fmt.Sprintf("B: the whole artifact over one %d Mbit/s link (s)", mbit), func(r LinkChunksRun) string { return Secs(wireTime(r.BArtifact, mbit)) })
	row("B: create -> BUILT (s)", func(r LinkChunksRun) string { return Secs(r.BBuilt) })
	row("B: create -> node READY, median over nodes (s)", func(r LinkChunksRun) string { return Secs(Median(r.BNodeReady)) })
	row("B: create -> node READY, slowest node (s)", func(r LinkChunksRun) string { return Secs(slices.Max(append([]time.Duration{0}, r.BNodeReady...))) })
	row("B: BUILT -> READY on all 8 (s)", func(r LinkChunksRun) string {
		return Secs(slices.Max(append([]time.Duration{0}, r.BNodeReady...)) - r.BBuilt)
	})
	row("B: distribution floor on this machine, 8 x (sha256 + dd oflag=direct) at once, no network (s)", func(r LinkChunksRun) string {
		if r.Floor <= 0 {
			return "-"
		}
		return Secs(r.Floor)
	})
	row("B: MB received per node, median / max", func(r LinkChunksRun) string { return mbPair(r.BRecv) })
	row("B: received / artifact, median node", func(r LinkChunksRun) string {
		if r.BArtifact <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.3f", float64(medianInt(r.BRecv))/float64(r.BArtifact))
	})
	return t
}

func mbPair(v []int64) string {
	if len(v) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f / %.1f", mb(medianInt(v)), mb(slices.Max(v)))
}

// wireTime is how long n bytes take over a link of mbit Mbit/s.
func wireTime(n int64, mbit int) time.Duration {
	if mbit <= 0 {
		return 0
	}
	return time.Duration(float64(n*8) / float64(mbit*1e6) * float64(time.Second))
}

// txBytes reads how many bytes the host side of each node's veth pair has
// sent: what the node received.
func (l *links) txBytes() ([]int64, error) {
	out := make([]int64, l.nodes)
	for i := range l.nodes {
		b, err := os.ReadFile(filepath.Join("/sys/class/net", l.hostVeth(i), "statistics", "tx_bytes"))
		if err != nil {
			return nil, err
		}
		if out[i], err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func deltas(before, after []int64) []int64 {
	out := make([]int64, len(after))
	for i := range after {
		out[i] = after[i] - before[i]
	}
	return out
}

// appImage is base with a 30 MB app layer of seeded random files on top
// (written into dir), for the links-chunks part.
func appImage(base *Image, dir string, seed uint64) (*Image, error) {
	img := &Image{Format: base.Format, Dir: dir, Entries: base.Entries, Content: base.Content}
	for _, l := range base.Layers {
		l.File = base.path(l)
		img.Layers = append(img.Layers, l)
	}
	l, _, err := writeLayer(filepath.Join(dir, fmt.Sprintf("app-%d.tar.gz", seed)), func(w *layerWriter) error {
		return w.addRandom("app/assets", seed, chunkTopLayer)
	})
	if err != nil {
		return nil, err
	}
	l.What = fmt.Sprintf("app %d: 30 MB of seeded random files", seed)
	img.add(l)
	return img, nil
}

func linkChunksPart(o Options, out io.Writer, logf func(string, ...any)) error {
	if o.MySQLDSN == "" {
		return fmt.Errorf("no MariaDB: set CUBE_TEST_MYSQL_DSN or -mysql (make bench starts one)")
	}
	if o.ChunkLinkMbit <= 0 {
		return fmt.Errorf("the linkchunks part needs -chunk-link above 0 (Mbit/s), not %d", o.ChunkLinkMbit)
	}
	for _, f := range []string{"cubemaster", "nodeagent"} {
		if _, err := os.Stat(filepath.Join(o.Bin, f)); err != nil {
			return fmt.Errorf("%s not built in %s (run make build): %w", f, o.Bin, err)
		}
	}
	base, err := MakeImage(filepath.Join(o.Work, "image"), filepath.Join(o.Bin, "templatecenter"), logf)
	if err != nil {
		return err
	}
	dir := filepath.Join(o.Work, "linkchunks")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	tag := strings.ReplaceAll(imageFormat, "/", "-")
	var refs []string
	for _, seed := range []uint64{1, 2} {
		img, err := appImage(base, dir, seed)
		if err != nil {
			return err
		}
		ref := fmt.Sprintf("%s/bench/rootfs:%s-app%d", o.Registry, tag, seed)
		if _, err := img.Push(ref); err != nil {
			return err
		}
		refs = append(refs, ref)
	}
	l := &links{nodes: 8, mbit: o.ChunkLinkMbit}
	if err := l.setup(); err != nil {
		return err
	}
	defer l.teardown()
	var runs []LinkChunksRun
	for i, chunks := range []bool{true, false} {
		start := time.Now()
		r, err := linkChunksRun(o, l, refs, chunks, i == 1, logf)
		if err != nil {
			return err
		}
		logf("linkchunks, chunks %v: A READY %.1fs; B built %.1fs, nodes READY %s; B received per node %s MB of %.0f MB (%.0fs in all)",
			chunks, r.AReady.Seconds(), r.BBuilt.Seconds(), durList(r.BNodeReady), mbPair(r.BRecv), mb(r.BArtifact), time.Since(start).Seconds())
		runs = append(runs, r)
	}
	fmt.Fprintf(out, "\n## Links: a rebuild on 8 nodes with and without chunks\n\n")
	fmt.Fprintf(out, "One cubemaster and one templatecenter (file store, default builder) on a fresh MariaDB database each mode, 8 node agents each in a network namespace, its link from the master shaped to %d Mbit/s (tc tbf). Template A (%s) to all 8 nodes, then template B (%s: the same base, another 30 MB top layer). Chunks on: the default; off: CUBE_TEMPLATE_CENTER_CHUNKS=false (no index, whole files). Bytes: what the host side of each node's link sent. One run per mode; load average at the end: %s\n\n",
		o.ChunkLinkMbit, refs[0], refs[1], Load())
	linkChunksTable(runs, o.ChunkLinkMbit).Write(out)
	return nil
}

func durList(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, fmt.Sprintf("%.1f", d.Seconds()))
	}
	return strings.Join(s, " ")
}

// linkChunksRun starts a stack with chunks on or off, sends A then B to the
// 8 nodes and measures B.
func linkChunksRun(o Options, l *links, refs []string, chunks, floor bool, logf func(string, ...any)) (LinkChunksRun, error) {
	r := LinkChunksRun{Chunks: chunks}
	s, err := startStack(o, l.nodes, l, logf, "CUBE_TEMPLATE_CENTER_CHUNKS="+strconv.FormatBool(chunks))
	if err != nil {
		return r, err
	}
	defer s.close()
	fail := func(err error) (LinkChunksRun, error) {
		for _, p := range s.procs {
			logf("---- %s log ----\n%s", p.name, p.tail())
		}
		return r, err
	}
	before, err := l.txBytes()
	if err != nil {
		return r, err
	}
	a, err := s.createAndWait("bench-a", refs[0], "20Gi", 10*time.Minute)
	if err != nil {
		return fail(err)
	}
	mid, err := l.txBytes()
	if err != nil {
		return r, err
	}
	r.AReady, r.ARecv = a.ready, deltas(before, mid)
	b, err := s.createAndWait("bench-b", refs[1], "20Gi", 10*time.Minute)
	if err != nil {
		return fail(err)
	}
	after, err := l.txBytes()
	if err != nil {
		return r, err
	}
	r.BBuilt, r.BNodeReady, r.BRecv = b.built, b.nodeReady, deltas(mid, after)
	if f, err := s.artifactFile(b.job.ArtifactID); err == nil {
		r.BArtifact = fileSize(f)
	}
	if floor {
		if r.Floor, err = s.copyBound(b.job.ArtifactID); err != nil {
			return r, fmt.Errorf("distribution floor: %w", err)
		}
	}
	return r, nil
}
