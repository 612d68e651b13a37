package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/cubesandbox/templatecenter/adapters/artifactstore"
	"github.com/cubesandbox/templatecenter/adapters/builder/ext4stream"
	"github.com/cubesandbox/templatecenter/adapters/chunkstore"
	"github.com/cubesandbox/templatecenter/adapters/cubelet"
	"github.com/cubesandbox/templatecenter/adapters/cubelet/agent"
	"github.com/cubesandbox/templatecenter/adapters/layers"
	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/core"
	corepipeline "github.com/cubesandbox/templatecenter/core/pipeline"
	"github.com/cubesandbox/templatecenter/ports"
)

// The chunks part (-parts chunks) measures what a node receives when it
// already holds one artifact and is sent another, with the data plane's
// chunk store and the node agent's assembly (no registry, no services:
// images are built in this process with the project's flattener and the
// ext4stream builder, published to a file store and its chunk store, and
// served to a node agent by a small server that counts the body bytes it
// sends):
//
//	(a) the same base with a different top layer of ~30 MB
//	(b) the same image with 30 files of one lower layer rewritten (and
//	    grown, so the content after them moves)
//	(c) an unrelated image
//
// each against the new artifact's whole size; the chunk store's size
// against the whole files'; the publish with chunks against without (the
// cost added to a cold build, whose build is timed too); and the Go heap
// a cold build (flatten + ext4) holds at its peak, per tree entry.
const (
	chunkTopLayer   = 30 << 20
	chunkBaseBudget = 300 << 20
	chunkGoBudget   = 200 << 20
	chunkOtherBytes = 300 << 20
	changedFiles    = 30
)

type chunkImage struct {
	name   string
	layers []string
	file   string
	size   int64
	sha    string
	tree   ports.TreeStats
	build  time.Duration
	heap   uint64 // peak Go heap during the build, less the heap before
	pubW   time.Duration
	pubWC  time.Duration // until the chunks are stored too
	// pubReady is when a data-plane build would return (READY): the whole
	// file stored, then the chunks as long as pipeline.ChunksWaitFor says.
	pubReady time.Duration
	chunks   int
}

func chunksPart(o Options, out io.Writer, logf func(string, ...any)) error {
	work := filepath.Join(o.Work, "chunks")
	if err := os.RemoveAll(work); err != nil {
		return err
	}
	defer os.RemoveAll(work)
	ld := filepath.Join(work, "layers")
	if err := os.MkdirAll(ld, 0o755); err != nil {
		return err
	}
	goroot := "/usr/local/go"
	if s, err := runOut("go", "env", "GOROOT"); err == nil && strings.TrimSpace(s) != "" {
		goroot = strings.TrimSpace(s)
	}
	mk := func(name string, fill func(*layerWriter) error) (string, error) {
		file := filepath.Join(ld, name+".tar.gz")
		l, _, err := writeLayer(file, fill)
		if err != nil {
			return "", err
		}
		logf("chunks: layer %s: %d entries, %d MB", name, l.Entries, l.Content>>20)
		return file, nil
	}
	base := func(changed bool) func(*layerWriter) error {
		return func(w *layerWriter) error {
			if changed {
				w.rewrite = changedFiles
			}
			for _, s := range []source{{"/etc", "etc"}, {"/usr/bin", "usr/bin"}, {"/usr/sbin", "usr/sbin"}, {"/usr/lib", "usr/lib"}} {
				if err := w.addTree(s.dir, s.dst, chunkBaseBudget); err != nil {
					return err
				}
			}
			return nil
		}
	}
	l0, err := mk("base", base(false))
	if err != nil {
		return err
	}
	l0b, err := mk("base-30-changed", base(true))
	if err != nil {
		return err
	}
	l1, err := mk("toolchain", func(w *layerWriter) error { return w.addTree(goroot, "usr/local/go", chunkGoBudget) })
	if err != nil {
		return err
	}
	t1, err := mk("app-1", func(w *layerWriter) error { return w.addRandom("app", 1, chunkTopLayer) })
	if err != nil {
		return err
	}
	t2, err := mk("app-2", func(w *layerWriter) error { return w.addRandom("app", 2, chunkTopLayer) })
	if err != nil {
		return err
	}
	other, err := mk("other", func(w *layerWriter) error {
		for _, s := range []source{{"/usr/share", "usr/share"}, {"/usr/include", "usr/include"}} {
			if err := w.addTree(s.dir, s.dst, chunkOtherBytes); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}

	store, err := artifactstore.Open(context.Background(), "file://"+filepath.Join(work, "store")+"?create_dir=true")
	if err != nil {
		return err
	}
	defer store.Close()
	chunks := chunkstore.New(store)
	imgs := []*chunkImage{
		{name: "held", layers: []string{l0, l1, t1}},
		{name: "a-new-top", layers: []string{l0, l1, t2}},
		{name: "b-30-changed", layers: []string{l0b, l1, t1}},
		{name: "c-unrelated", layers: []string{other}},
	}
	for _, img := range imgs {
		if err := img.buildAndPublish(work, store, chunks); err != nil {
			return fmt.Errorf("chunks: %s: %w", img.name, err)
		}
		logf("chunks: %s: %d MB, %d entries, build %.2fs, publish %.2fs whole / %.2fs to READY with chunks on / %.2fs until the chunks are stored, %d chunks",
			img.name, img.size>>20, img.tree.Entries, img.build.Seconds(), img.pubW.Seconds(), img.pubReady.Seconds(), img.pubWC.Seconds(), img.chunks)
	}

	type result struct {
		img      *chunkImage
		received int64
		reqs     int64
		dur      time.Duration
	}
	var results []result
	// The node that holds nothing: it gets "held" whole (and its index).
	first, err := receive(work, store, chunks, nil, imgs[0])
	if err != nil {
		return err
	}
	for _, img := range imgs[1:] {
		r, err := receive(work, store, chunks, imgs[0], img)
		if err != nil {
			return fmt.Errorf("chunks: node receiving %s: %w", img.name, err)
		}
		results = append(results, result{img, r.bytes, r.requests, r.dur})
	}
	whole, chunked, err := storeBytes(filepath.Join(work, "store"))
	if err != nil {
		return err
	}

	fmt.Fprintf(out, "\n### Chunks: what a node receives\n\nThe node holds the first image (%d MB, received whole with its index: %d bytes, %.4f of the file, in %.2fs); then it is sent each of the others.\n\n",
		imgs[0].size>>20, first.bytes, float64(first.bytes)/float64(imgs[0].size), first.dur.Seconds())
	fmt.Fprintln(out, "| scenario | artifact MB | received MB | received / artifact | requests | goal | met |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|")
	goals := map[string]float64{"a-new-top": 0.15, "b-30-changed": 0.10, "c-unrelated": 1.02}
	what := map[string]string{
		"a-new-top":    "(a) same base, another ~30 MB top layer",
		"b-30-changed": fmt.Sprintf("(b) %d files of the base layer rewritten", changedFiles),
		"c-unrelated":  "(c) an unrelated image",
	}
	for _, r := range results {
		ratio := float64(r.received) / float64(r.img.size)
		g := goals[r.img.name]
		fmt.Fprintf(out, "| %s | %.1f | %.1f | %.3f | %d | ≤ %.2f | %s |\n", what[r.img.name], mb(r.img.size), mb(r.received), ratio, r.reqs, g, yes(ratio <= g))
	}
	var sumWhole int64
	for _, img := range imgs {
		sumWhole += img.size
	}
	fmt.Fprintf(out, "\nStorage for the %d artifacts: whole files %.1f MB, chunk store %.1f MB (%.2f of the whole files; whole-file objects on disk: %.1f MB).\n",
		len(imgs), mb(sumWhole), mb(chunked), float64(chunked)/float64(sumWhole), mb(whole))
	fmt.Fprintln(out, "\n| image | entries | build s | publish whole s | publish to READY with chunks s | added to build + publish | chunks stored after s | Go heap peak MB | heap bytes / entry |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|---|")
	for _, img := range imgs {
		added := (img.pubReady - img.pubW).Seconds() / (img.build + img.pubW).Seconds()
		fmt.Fprintf(out, "| %s | %d | %.2f | %.2f | %.2f | %+.1f %% | %.2f | %.0f | %.0f |\n", img.name, img.tree.Entries, img.build.Seconds(),
			img.pubW.Seconds(), img.pubReady.Seconds(), 100*added, img.pubWC.Seconds(), float64(img.heap)/(1<<20), float64(img.heap)/float64(max(1, img.tree.Entries)))
	}
	return nil
}

func mb(n int64) float64 { return float64(n) / 1e6 }

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}

// buildAndPublish builds the image from its layers, then publishes it to
// store alone and to store and the chunk store at once (as the pipeline
// does), each timed.
func (img *chunkImage) buildAndPublish(work string, store *artifactstore.Store, chunks *chunkstore.Store) error {
	ctx := context.Background()
	img.file = filepath.Join(work, img.name+".ext4")
	var ls []ports.FlattenLayer
	for _, l := range img.layers {
		ls = append(ls, ports.FlattenLayer{Path: l, MediaType: string(types.OCILayer), Digest: "sha256:" + strings.Repeat("0", 64)})
	}
	cfg := config.Defaults()
	spec := ports.BuildSpec{OutPath: img.file, UUID: "6c1f4a3e-0000-4000-8000-000000000001", Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		HeadroomBytes: cfg.HeadroomBytes, HeadroomInodes: cfg.HeadroomInodes}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	stop := make(chan struct{})
	var peak atomic.Uint64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if h := m.HeapInuse; h > peak.Load() {
				peak.Store(h)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	start := time.Now()
	var res ports.BuildResult
	st, err := layers.Flattener{}.Flatten(ctx, ls, func(tree ports.Tree) error {
		var err error
		res, err = ext4stream.New().Build(ctx, spec, tree)
		return err
	})
	img.build = time.Since(start)
	close(stop)
	wg.Wait()
	if err != nil {
		return err
	}
	if p := peak.Load(); p > before.HeapInuse {
		img.heap = p - before.HeapInuse
	}
	img.tree, img.size, img.sha = st, res.SizeBytes, res.SHA256
	want := ports.ObjectInfo{Size: img.size, SHA256: img.sha}
	// Whole file alone (as without chunks), under a key of its own.
	start = time.Now()
	if err := putFile(ctx, store, img.name+"/whole-only.ext4", img.file, want); err != nil {
		return err
	}
	img.pubW = time.Since(start)
	// Whole file and chunks at once, as the pipeline publishes: the build
	// returns once the whole file is stored and the chunks are, or when
	// pipeline.ChunksWaitFor stops waiting for them.
	start = time.Now()
	var cerr error
	chunked := make(chan struct{})
	var read atomic.Int64
	go func() {
		defer close(chunked)
		f, err := os.Open(img.file)
		if err != nil {
			cerr = err
			return
		}
		defer f.Close()
		cerr = chunks.Put(ctx, core.ArtifactObjectKey(img.name), countingFile{f, &read}, want)
	}()
	werr := putFile(ctx, store, core.ArtifactObjectKey(img.name), img.file, want)
	el := time.Since(start)
	select {
	case <-chunked:
	case <-time.After(corepipeline.ChunksWaitFor(corepipeline.DefaultChunksWait, img.build, el, read.Load(), img.size)):
	}
	img.pubReady = time.Since(start)
	<-chunked
	img.pubWC = time.Since(start)
	if werr != nil || cerr != nil {
		return fmt.Errorf("publish: %v %v", werr, cerr)
	}
	_ = store.Delete(ctx, img.name+"/whole-only.ext4")
	x, err := chunks.Index(ctx, core.ArtifactObjectKey(img.name))
	if err != nil {
		return err
	}
	img.chunks = len(x.Chunks)
	return nil
}

// countingFile counts the bytes the chunk store reads (as the pipeline's).
type countingFile struct {
	*os.File
	n *atomic.Int64
}

func (c countingFile) Read(p []byte) (int, error) {
	n, err := c.File.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func putFile(ctx context.Context, s ports.ArtifactStore, key, file string, want ports.ObjectInfo) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	return s.Put(ctx, key, f, want)
}

type received struct {
	bytes, requests int64
	dur             time.Duration
}

// receive starts a node agent with a fresh data dir, gives it held (if
// any) first, then counts what crosses the network for img.
func receive(work string, store *artifactstore.Store, chunks *chunkstore.Store, held, img *chunkImage) (received, error) {
	ctx := context.Background()
	var sent, reqs atomic.Int64
	srv := httptest.NewServer(chunkOrigin(store, chunks, &sent, &reqs))
	defer srv.Close()
	const token = "bench-node-credential-0123456789"
	dir, err := os.MkdirTemp(work, "node-")
	if err != nil {
		return received{}, err
	}
	defer os.RemoveAll(dir)
	a, err := agent.New(agent.Config{DataDir: dir, NodeID: "bench-node", Token: token, MasterURLs: []string{srv.URL},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return received{}, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return received{}, err
	}
	gs := a.NewServer()
	go gs.Serve(lis)
	defer gs.Stop()
	dial, _, err := cubelet.NodeCredentials{Token: token}.DialOptions()
	if err != nil {
		return received{}, err
	}
	client := cubelet.New(cubelet.Options{DialOptions: dial, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer client.Close()
	node := ports.Node{ID: "bench-node", Addr: lis.Addr().String(), Healthy: true}
	send := func(i *chunkImage) error {
		return client.CreateImage(ctx, node, core.NodeArtifact{ArtifactID: "rfs-" + i.name, DownloadURL: core.DownloadURL(srv.URL, "rfs-"+i.name, "t"),
			Token: "t", SHA256: i.sha, SizeBytes: i.size, InstanceType: "cubebox"})
	}
	if held != nil {
		if err := send(held); err != nil {
			return received{}, err
		}
	}
	sent.Store(0)
	reqs.Store(0)
	start := time.Now()
	if err := send(img); err != nil {
		return received{}, err
	}
	return received{bytes: sent.Load(), requests: reqs.Load(), dur: time.Since(start)}, nil
}

// chunkOrigin serves the download, chunk index and chunk data routes from
// the stores as the template center does (without rows and tokens),
// counting the body bytes it sends.
func chunkOrigin(store *artifactstore.Store, chunks *chunkstore.Store, sent, reqs *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqs.Add(1)
		ctx := r.Context()
		key := core.ArtifactObjectKey(strings.TrimPrefix(r.URL.Query().Get("artifact_id"), "rfs-"))
		cw := &countingWriter{w: w}
		defer func() { sent.Add(cw.n) }()
		switch r.URL.Path {
		case core.DownloadPath:
			rc, err := store.Open(ctx, key, 0, -1)
			if err != nil {
				http.Error(w, err.Error(), http.StatusNotFound)
				return
			}
			defer rc.Close()
			_, _ = io.Copy(cw, rc)
		case core.ChunkIndexPath:
			x, err := chunks.Index(ctx, key)
			if err != nil {
				http.Error(w, err.Error(), http.StatusNotFound)
				return
			}
			b, _ := x.Marshal()
			_, _ = cw.Write(b)
		case core.ChunkDataPath:
			x, err := chunks.Index(ctx, key)
			if err != nil {
				http.Error(w, err.Error(), http.StatusNotFound)
				return
			}
			first, _ := strconv.Atoi(r.URL.Query().Get("first"))
			count, _ := strconv.Atoi(r.URL.Query().Get("count"))
			if first < 0 || count < 1 || first+count > len(x.Chunks) {
				http.Error(w, "bad range", http.StatusBadRequest)
				return
			}
			for _, e := range x.Chunks[first : first+count] {
				if e.Zero {
					continue
				}
				rc, err := chunks.OpenChunk(ctx, e.ID())
				if err != nil {
					panic(http.ErrAbortHandler)
				}
				_, _ = io.Copy(cw, rc)
				rc.Close()
			}
		default:
			http.NotFound(w, r)
		}
	})
}

// storeBytes sums the file store's whole-file objects and its chunk store
// (_chunks: chunks and indexes).
func storeBytes(dir string) (whole, chunked int64, err error) {
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if strings.HasPrefix(rel, "_chunks"+string(filepath.Separator)) {
			chunked += info.Size()
		} else {
			whole += info.Size()
		}
		return nil
	})
	return whole, chunked, err
}

// addRandom adds n bytes of incompressible files under dir (an app's
// binaries and assets), seeded: the same seed gives the same files.
func (w *layerWriter) addRandom(dir string, seed uint64, n int64) error {
	r := rand.NewChaCha8([32]byte{byte(seed), 0xa9})
	sizes := rand.New(rand.NewPCG(seed, 7))
	buf := make([]byte, 1<<20)
	for i := 0; n > 0; i++ {
		size := min(n, int64(4<<10+sizes.IntN(400<<10)))
		name := path.Join(dir, fmt.Sprintf("m%02d", i%17), fmt.Sprintf("f%04d.bin", i))
		if err := w.addFile(name, 0o644, size, buf, func(b []byte) { _, _ = r.Read(b) }); err != nil {
			return err
		}
		n -= size
	}
	return nil
}

// rewritten returns the content addTree writes for a file it was told to
// rewrite: different bytes, and 100 more of them, so that what follows
// the file in its layer moves.
func rewritten(in io.Reader, size int64) (io.Reader, int64) {
	b, _ := io.ReadAll(io.LimitReader(in, size))
	for i := range b {
		if i%64 == 0 {
			b[i] ^= 0x5a
		}
	}
	b = append(b, bytes.Repeat([]byte("rebuilt "), 13)[:100]...)
	return bytes.NewReader(b), int64(len(b))
}
