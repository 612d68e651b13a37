package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/cubesandbox/templatecenter/core"
)

// The node-local cache: the artifact download route, served on the node
// (CacheHandler) for a client that only speaks whole-file downloads, a
// real Cubelet. The master's download URL for the node points here
// (CUBE_MASTER_NODE_DOWNLOAD_BASE_URL); the cache asks its master for the
// artifact's chunk index with the caller's token (so the master still
// decides who may have which artifact, on every request), builds the
// artifact from the chunks the node holds and the missing ones it fetches
// (chunks.go, every chunk and the whole file checked), and serves the file
// over loopback with Range and an ETag. Only the missing chunks cross the
// network. An artifact the master has no index for is passed through from
// the master's download route as it comes. Assembled artifacts stay under
// <data>/cache/ as seeds for the next, the least recently served removed
// first beyond Config.CacheMaxBytes.

// CacheInstanceType is the directory under the data dir that holds the
// cache's artifacts.
const CacheInstanceType = "cache"

// CacheHandler serves GET and HEAD of core.DownloadPath (under any path
// prefix) from the cache.
func (a *Agent) CacheHandler() http.Handler {
	return http.HandlerFunc(a.serveCache)
}

func (a *Agent) serveCache(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if !strings.HasSuffix(r.URL.Path, core.DownloadPath) {
		http.NotFound(w, r)
		return
	}
	q := r.URL.Query()
	id := q.Get("artifact_id")
	if err := checkName("artifact_id", id); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	token := r.Header.Get(core.DownloadTokenHeader)
	if token == "" {
		token = q.Get("token")
	}
	up := a.upstream(r.URL.RawQuery)
	log := a.log.With("cache", true, "artifact_id", id)
	ctx := r.Context()
	j := &artifactJob{id: id, instanceType: CacheInstanceType, url: up, token: token, size: -1}
	cf, err := a.fetchIndex(ctx, j)
	var status *statusError
	switch {
	case errors.Is(err, errNoIndex):
		log.Info("no chunk index: passing the master's download through")
		a.passThrough(w, r, up, token)
		return
	case errors.As(err, &status):
		http.Error(w, fmt.Sprintf("the master answered %s", status.status), status.code)
		return
	case err != nil:
		log.Warn("chunk index refused: passing the master's download through", "err", err)
		a.passThrough(w, r, up, token)
		return
	}
	j.sha256, j.size = cf.x.SHA256Hex(), cf.x.Size
	unlock, err := a.locks.lock(ctx, "artifact/"+id)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	n, fetched, err := a.ensureArtifact(ctx, j)
	unlock()
	if err != nil {
		log.Error("cache: artifact not assembled", "err", err)
		http.Error(w, fmt.Sprintf("node %s: artifact %s: %v", a.cfg.NodeID, id, err), http.StatusBadGateway)
		return
	}
	final := a.ArtifactFile(CacheInstanceType, id)
	if fetched {
		log.Info("cache: artifact stored", "bytes", n)
		a.evict(final)
	}
	f, err := os.Open(final)
	if err != nil {
		// Evicted by another request meanwhile: the client retries.
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer f.Close()
	now := time.Now()
	_ = os.Chtimes(final, now, now) // recently served: evicted last
	w.Header().Set("ETag", `"`+j.sha256+`"`)
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, "", time.Time{}, f)
}

// upstream is the master's download URL for a request's query.
func (a *Agent) upstream(rawQuery string) *url.URL {
	b := *a.bases[0]
	b.Path = strings.TrimSuffix(b.Path, "/") + core.DownloadPath
	b.RawQuery = rawQuery
	return &b
}

// statusError is an answer of the master's that the cache passes on.
type statusError struct {
	code   int
	status string
}

func (e *statusError) Error() string { return "HTTP " + e.status }

// passThrough streams the master's answer to a download (a redirect to an
// object store followed, the token not sent along) to the client.
func (a *Agent) passThrough(w http.ResponseWriter, r *http.Request, up *url.URL, token string) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, up.String(), nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if token != "" {
		req.Header.Set(core.DownloadTokenHeader, token)
	}
	for _, h := range []string{"Range", "If-Range", "If-None-Match"} {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	resp, err := a.cfg.HTTPClient.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		http.Error(w, fmt.Sprintf("download %s: %v", redact(up), err), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for _, h := range []string{"Content-Type", "Content-Length", "Content-Range", "Accept-Ranges", "ETag"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// evict removes the least recently served cache artifacts, other than
// keep, while the cache holds more than CacheMaxBytes.
func (a *Agent) evict(keep string) {
	limit := a.cfg.CacheMaxBytes
	if limit <= 0 {
		return
	}
	root := filepath.Join(a.cfg.DataDir, CacheInstanceType)
	dirs, err := os.ReadDir(root)
	if err != nil {
		return
	}
	type held struct {
		id   string
		size int64
		used time.Time
	}
	var all []held
	var total int64
	for _, d := range dirs {
		if !d.IsDir() || checkName("artifact id", d.Name()) != nil {
			continue
		}
		st, err := os.Stat(filepath.Join(root, d.Name(), d.Name()+".ext4"))
		if err != nil {
			continue
		}
		all = append(all, held{d.Name(), st.Size(), st.ModTime()})
		total += st.Size()
	}
	sort.Slice(all, func(i, k int) bool { return all[i].used.Before(all[k].used) })
	for _, h := range all {
		if total <= limit {
			return
		}
		p := filepath.Join(root, h.id)
		if filepath.Join(p, h.id+".ext4") == keep {
			continue
		}
		unlock, err := a.locks.lock(context.Background(), "artifact/"+h.id)
		if err != nil {
			continue
		}
		if os.RemoveAll(p) == nil {
			total -= h.size
			a.log.Info("cache: artifact evicted", "artifact_id", h.id, "bytes", h.size)
		}
		unlock()
	}
}
