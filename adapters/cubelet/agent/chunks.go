package agent

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/chunk"
)

// A node builds a new artifact from the chunks it already holds in its
// other artifacts and fetches only the rest (core/chunk, core.ChunkURLs):
//
//  1. the index comes from the chunk index route beside the download URL
//     (same master, same token); it must be well formed and describe the
//     annotated size and sha256, else the whole file is downloaded;
//  2. the new file is written in one pass, front to back, like a download
//     (assemble.go): every chunk the node holds (its artifacts' indexes are
//     kept beside them, <aid>.ext4.chunks) is read from where it is and
//     checked against its sha256; zero chunks are zeros;
//  3. the missing chunks are fetched in runs from the chunk data route,
//     several runs at once and ahead of the writer, within a bounded
//     window, each chunk checked as it arrives;
//  4. the file's sha256 is computed over the bytes as they are written and
//     must be the annotated one; then it is synced and renamed into place
//     like a download.
//
// Any failure (a chunk that does not match, a short or missing run, an
// index that is corrupt, truncated or hostile) removes the partial file and
// falls back to the whole-file download: nothing half-written stays. So
// does a node that holds too little of the artifact for chunks to pay
// (minReuse): it downloads the file, and keeps the index for next time.

// chunkSidecar holds the chunk index of the artifact file beside it.
func chunkSidecar(final string) string { return final + ".chunks" }

const (
	// minReuse is the share of the artifact's data a node must already
	// hold for it to assemble from chunks rather than download the file.
	minReuse = 0.10
	// runBytes bounds one chunk data request.
	runBytes = 16 << 20
	// fetchers is how many chunk data requests run at once.
	fetchers = 4
	// maxIndexBytes bounds an index whose artifact size is not annotated.
	maxIndexBytes = 256 << 20
)

// errNoIndex: the master has no chunk index for the artifact (or speaks no
// chunks): the whole file is downloaded, as before chunks.
var errNoIndex = errors.New("no chunk index")

// chunkFetch is one chunked fetch under way.
type chunkFetch struct {
	a     *Agent
	j     *artifactJob
	index []byte // the encoded index, kept beside the artifact
	x     *chunk.Index
	data  *url.URL
}

// fetchIndex gets and checks the artifact's chunk index. errNoIndex when
// there is none; any other error means the index cannot be trusted.
func (a *Agent) fetchIndex(ctx context.Context, j *artifactJob) (*chunkFetch, error) {
	ixURL, dataURL, ok := core.ChunkURLs(j.url)
	if !ok || !a.fromMaster(ixURL) || !a.fromMaster(dataURL) {
		return nil, errNoIndex
	}
	resp, err := a.get(ctx, ixURL, j.token)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound || (resp.StatusCode >= 300 && resp.StatusCode < 400) {
		return nil, errNoIndex
	}
	if resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized {
		return nil, &statusError{code: resp.StatusCode, status: resp.Status}
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("chunk index %s: HTTP %s", redact(ixURL), resp.Status)
	}
	limit := int64(maxIndexBytes)
	if j.size >= 0 {
		limit = chunk.MaxEncodedLen(j.size)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("chunk index %s: %w", redact(ixURL), err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("chunk index %s: larger than an index of the artifact can be: %w", redact(ixURL), chunk.ErrCorrupt)
	}
	x, err := chunk.Unmarshal(b)
	if err != nil {
		return nil, fmt.Errorf("chunk index %s: %w", redact(ixURL), err)
	}
	// The cache learns the size and sha256 from the index (j.sha256 "").
	if (j.sha256 != "" && x.SHA256Hex() != j.sha256) || (j.size >= 0 && x.Size != j.size) {
		return nil, fmt.Errorf("chunk index %s: describes another artifact than the annotated size and sha256: %w", redact(ixURL), chunk.ErrCorrupt)
	}
	return &chunkFetch{a: a, j: j, index: b, x: x, data: dataURL}, nil
}

// get sends a GET with the artifact token, follows no redirect, and
// reports errors without the URL's query.
func (a *Agent) get(ctx context.Context, u *url.URL, token string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", redact(u), err)
	}
	if token != "" {
		req.Header.Set(core.DownloadTokenHeader, token)
	}
	// Chunks come from the master itself: a redirect (an object store's
	// URL for a whole file) is not followed, and no token leaves with it.
	c := *a.cfg.HTTPClient
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%s: %w", redact(u), err)
	}
	return resp, nil
}

// seed is where a chunk the node holds lives.
type seed struct {
	path string
	off  int64
}

// seeds finds where the node holds the data chunks of x: in every
// artifact whose index is kept beside it, except the file being replaced.
// Only x's chunks are kept, so a node with many artifacts does not hold
// all their chunk lists at once.
func (a *Agent) seeds(ctx context.Context, except string, x *chunk.Index) map[[sha256.Size]byte]seed {
	out := map[[sha256.Size]byte]seed{}
	want := make(map[[sha256.Size]byte]bool, len(x.Chunks))
	for _, e := range x.Chunks {
		if !e.Zero {
			want[e.Sum] = true
		}
	}
	types, err := os.ReadDir(a.cfg.DataDir)
	if err != nil {
		return out
	}
	for _, t := range types {
		if !t.IsDir() || checkInstanceType(t.Name()) != nil {
			continue
		}
		arts, _ := os.ReadDir(filepath.Join(a.cfg.DataDir, t.Name()))
		for _, d := range arts {
			if !d.IsDir() || checkName("artifact id", d.Name()) != nil {
				continue
			}
			final := filepath.Join(a.cfg.DataDir, t.Name(), d.Name(), d.Name()+".ext4")
			if final == except {
				continue
			}
			b, err := os.ReadFile(chunkSidecar(final))
			if errors.Is(err, fs.ErrNotExist) {
				b, err = a.indexHeld(ctx, final)
			}
			if err != nil {
				continue
			}
			held, err := chunk.Unmarshal(b)
			if err != nil {
				continue
			}
			if st, err := os.Stat(final); err != nil || st.Size() != held.Size {
				continue
			}
			for _, e := range held.Chunks {
				if want[e.Sum] {
					out[e.Sum] = seed{path: final, off: e.Offset}
				}
			}
		}
	}
	return out
}

// indexHeld makes the chunk index of a held artifact that came without
// one (downloaded whole while its index was not published yet, or before
// chunks were on): the chunking is deterministic (core/chunk), so the
// index is the one the store has. It is kept beside the file only if it
// matches the recorded sha256 and the file did not change meanwhile; the
// cost (one read of the file) is paid once, and only by a fetch that has
// chunks to look for.
func (a *Agent) indexHeld(ctx context.Context, final string) ([]byte, error) {
	want, err := os.ReadFile(sidecar(final))
	if err != nil {
		return nil, err
	}
	f, err := os.Open(final)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	before, err := f.Stat()
	if err != nil {
		return nil, err
	}
	x, err := chunk.Build(ctx, f, nil)
	if err != nil {
		return nil, err
	}
	if x.SHA256Hex()+"\n" != string(want) || x.Size != before.Size() {
		return nil, fmt.Errorf("held artifact %s does not match its recorded sha256", final)
	}
	if after, err := os.Stat(final); err != nil || !os.SameFile(before, after) || after.ModTime() != before.ModTime() {
		return nil, fmt.Errorf("held artifact %s changed while it was indexed", final)
	}
	b, err := x.Marshal()
	if err != nil {
		return nil, err
	}
	if err := a.writeFileAtomic(chunkSidecar(final), b); err != nil {
		return nil, err
	}
	a.log.Info("held artifact indexed for chunk reuse", "path", final, "chunks", len(x.Chunks))
	return b, nil
}

// chunkRun is one chunk data request: index entries first..first+count-1.
type chunkRun struct{ first, count int }

// runs groups the missing chunks into requests: consecutive index numbers
// (zero chunks between them cost nothing), at most runBytes and
// core.MaxChunksPerRequest each.
func (c *chunkFetch) runs(missing []int) []chunkRun {
	var out []chunkRun
	var bytes int64
	for k, i := range missing {
		if k > 0 {
			r := &out[len(out)-1]
			prev := missing[k-1]
			gapZero := true
			for g := prev + 1; g < i; g++ {
				gapZero = gapZero && c.x.Chunks[g].Zero
			}
			if gapZero && i-r.first+1 <= core.MaxChunksPerRequest && bytes+int64(c.x.Chunks[i].Length) <= runBytes {
				r.count = i - r.first + 1
				bytes += int64(c.x.Chunks[i].Length)
				continue
			}
		}
		out = append(out, chunkRun{first: i, count: 1})
		bytes = int64(c.x.Chunks[i].Length)
	}
	return out
}

// reuse is the share of the index's data bytes found among the seeds.
func (c *chunkFetch) reuse(seeds map[[sha256.Size]byte]seed) float64 {
	var have, all int64
	for _, e := range c.x.Chunks {
		if e.Zero {
			continue
		}
		all += int64(e.Length)
		if _, ok := seeds[e.Sum]; ok {
			have += int64(e.Length)
		}
	}
	if all == 0 {
		return 1
	}
	return float64(have) / float64(all)
}

// keepIndex writes the index beside the artifact, for the next fetch.
func (c *chunkFetch) keepIndex(final string) {
	if c == nil {
		return
	}
	if err := c.a.writeFileAtomic(chunkSidecar(final), c.index); err != nil {
		c.a.log.Warn("chunk index not kept beside the artifact", "artifact_id", c.j.id, "err", err)
	}
}

// removeStale removes an index left beside a file about to be replaced.
func removeStale(final string) error {
	if err := os.Remove(chunkSidecar(final)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
