package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/cubelet"
	"github.com/cubesandbox/templatecenter/adapters/cubelet/cubeletpb"
	"github.com/cubesandbox/templatecenter/core"
)

type imagesServer struct {
	cubeletpb.UnimplementedImagesServer
	a *Agent
}

// artifactJob is a validated CreateImage request.
type artifactJob struct {
	id           string
	instanceType string
	url          *url.URL // nil: check presence only
	token        string
	sha256       string // lower-case hex
	size         int64  // -1 when not annotated
}

var sha256Pattern = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)

// parseArtifact validates an ext4 ImageSpec and reads its annotations.
func parseArtifact(spec *cubeletpb.ImageSpec) (*artifactJob, error) {
	if spec == nil {
		return nil, errors.New("spec is required")
	}
	if spec.GetStorageMedia() != core.StorageMediaExt4 {
		return nil, fmt.Errorf("storage_media %q is not supported: this node agent stores %q artifacts only", spec.GetStorageMedia(), core.StorageMediaExt4)
	}
	art, err := cubelet.ArtifactOf(spec)
	if err != nil {
		return nil, err
	}
	j := &artifactJob{id: art.ArtifactID, token: art.Token, size: art.SizeBytes, instanceType: art.InstanceType}
	if err := checkName("artifact id", j.id); err != nil {
		return nil, err
	}
	if j.instanceType == "" {
		j.instanceType = core.DefaultInstanceType
	}
	if err := checkInstanceType(j.instanceType); err != nil {
		return nil, err
	}
	// No URL: a presence check (the master's replica check), answered
	// from the node's own copy and never downloading.
	if raw := art.DownloadURL; raw != "" {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("annotation %s is not an http(s) URL", core.AnnotationArtifactURL)
		}
		j.url = u
	}
	sum := art.SHA256
	if !sha256Pattern.MatchString(sum) {
		return nil, fmt.Errorf("annotation %s must be 64 hex digits, got %q", core.AnnotationArtifactSHA256, sum)
	}
	j.sha256 = strings.ToLower(sum)
	return j, nil
}

// redact drops the query (which may hold a token) from a URL for messages.
func redact(u *url.URL) string {
	return u.Scheme + "://" + u.Host + u.EscapedPath()
}

// CreateImage makes sure <data>/<instanceType>/<aid>/<aid>.ext4 holds the
// artifact with the annotated sha256, downloading it when it does not.
func (s imagesServer) CreateImage(ctx context.Context, req *cubeletpb.CreateImageRequest) (*cubeletpb.CreateImageRequestResponse, error) {
	a := s.a
	resp := &cubeletpb.CreateImageRequestResponse{RequestID: req.GetRequestID()}
	log := a.log.With("rpc", "CreateImage", "request_id", req.GetRequestID(), "image", req.GetSpec().GetImage())
	job, err := parseArtifact(req.GetSpec())
	if err != nil {
		log.Warn("bad request", "err", err)
		resp.Ret = fail(cubeletpb.ErrorCode_InvalidParamFormat, "node %s: CreateImage: %v", a.cfg.NodeID, err)
		return resp, nil
	}
	log = log.With("artifact_id", job.id, "instance_type", job.instanceType)
	if job.url != nil && !a.fromMaster(job.url) {
		// Refused before any connection: the agent fetches from its
		// masters only, whoever asks.
		log.Warn("download URL refused: not under a master base URL", "source", redact(job.url))
		resp.Ret = fail(cubeletpb.ErrorCode_InvalidParamFormat, "node %s: CreateImage %s: annotation %s: %s is not under a master base URL this node accepts (its CUBE_NODEAGENT_MASTER_URLS)",
			a.cfg.NodeID, job.id, core.AnnotationArtifactURL, redact(job.url))
		return resp, nil
	}
	unlock, err := a.locks.lock(ctx, "artifact/"+job.id)
	if err != nil {
		log.Warn("create image abandoned", "err", err)
		resp.Ret = fail(cubeletpb.ErrorCode_CreateImageFailed, "node %s: CreateImage %s: %v", a.cfg.NodeID, job.id, err)
		return resp, nil
	}
	defer unlock()
	start := time.Now()
	n, fetched, err := a.ensureArtifact(ctx, job)
	if errors.Is(err, errNotPresent) {
		log.Info("presence check: artifact not on this node")
		resp.Ret = fail(cubeletpb.ErrorCode_PreConditionFailed, "node %s: CreateImage %s: %v", a.cfg.NodeID, job.id, err)
		return resp, nil
	}
	if err != nil {
		log.Error("create image failed", "err", err, "elapsed", time.Since(start))
		resp.Ret = fail(cubeletpb.ErrorCode_CreateImageFailed, "node %s: CreateImage %s: %v", a.cfg.NodeID, job.id, err)
		return resp, nil
	}
	switch {
	case fetched:
		log.Info("artifact downloaded", "bytes", n, "elapsed", time.Since(start), "source", redact(job.url))
	case job.url == nil:
		// The master's replica check asks every sweep: not news.
		log.Debug("presence check: artifact present", "bytes", n)
	default:
		log.Info("artifact already present", "bytes", n)
	}
	resp.Ret = ok()
	return resp, nil
}

// errNotPresent answers a presence check for an artifact the node does not
// hold with the expected size and sha256. Its text says "does not exist",
// which the master's client reads as not found, as it reads a Cubelet's
// answer to the same call.
var errNotPresent = errors.New("the artifact does not exist on this node with the expected size and sha256 (a presence check: the request carries no download URL, so nothing was fetched)")

// ensureArtifact returns the artifact size and whether it had to fetch it.
// A job without a URL only checks: errNotPresent when the node lacks it.
func (a *Agent) ensureArtifact(ctx context.Context, j *artifactJob) (int64, bool, error) {
	final := a.ArtifactFile(j.instanceType, j.id)
	if n, ok := a.present(ctx, final, j); ok {
		return n, false, nil
	}
	if j.url == nil {
		return 0, false, errNotPresent
	}
	dir := filepath.Dir(final)
	if err := a.mkdirs(dir); err != nil {
		return 0, false, err
	}
	n, err := a.fetch(ctx, j, final)
	if err != nil {
		// Leave no empty artifact directory behind a failed first fetch.
		_ = os.Remove(dir)
		return 0, false, err
	}
	return n, true, nil
}

// sidecar holds the verified sha256 of the ext4 next to it, so a repeated
// CreateImage does not re-hash gigabytes.
func sidecar(final string) string { return final + ".sha256" }

// present reports whether final already holds the artifact.
func (a *Agent) present(ctx context.Context, final string, j *artifactJob) (int64, bool) {
	st, err := os.Stat(final)
	if err != nil || !st.Mode().IsRegular() {
		return 0, false
	}
	if j.size >= 0 && st.Size() != j.size {
		return 0, false
	}
	if b, err := os.ReadFile(sidecar(final)); err == nil && string(bytes.TrimSpace(b)) == j.sha256 {
		return st.Size(), true
	}
	sum, err := hashFile(ctx, final)
	if err != nil || sum != j.sha256 {
		return 0, false
	}
	_ = a.writeFileAtomic(sidecar(final), []byte(sum+"\n"))
	return st.Size(), true
}

// hashFile is the sha256 of the file at p; it stops when ctx ends (an
// artifact is gigabytes).
func hashFile(ctx context.Context, p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sum, _, err := core.SHA256OfContext(ctx, f)
	return sum, err
}

// fetch downloads into final+".download" (saveFile), verifies size and
// sha256 and renames it into place.
func (a *Agent) fetch(ctx context.Context, j *artifactJob, final string) (n int64, err error) {
	tmp := final + ".download"
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	// From chunks when the master has an index and the node holds enough
	// of it (chunks.go); otherwise, or when that fails, the whole file.
	cf, err := a.fetchIndex(ctx, j)
	switch {
	case err == nil:
		seeds := a.seeds(ctx, final, cf.x)
		if reuse := cf.reuse(seeds); reuse >= minReuse {
			got, aerr := cf.assemble(ctx, tmp, seeds)
			if aerr == nil {
				a.log.Info("artifact assembled from chunks", "artifact_id", j.id, "bytes", cf.x.Size, "fetched_bytes", got, "reused", reuse)
				return cf.x.Size, a.publishDownload(tmp, final, j, cf)
			}
			os.Remove(tmp)
			if ctx.Err() != nil {
				return 0, aerr
			}
			a.log.Warn("assembling the artifact from chunks failed; downloading the whole file", "artifact_id", j.id, "err", aerr)
		}
	case errors.Is(err, errNoIndex):
		cf = nil
	default:
		a.log.Warn("chunk index refused; downloading the whole file", "artifact_id", j.id, "err", err)
		cf = nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.url.String(), nil)
	if err != nil {
		return 0, fmt.Errorf("download %s: %w", redact(j.url), err)
	}
	if j.token != "" {
		req.Header.Set(core.DownloadTokenHeader, j.token)
	}
	resp, err := a.cfg.HTTPClient.Do(req)
	if err != nil {
		// The client error quotes the full URL; report the redacted one.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return 0, fmt.Errorf("download %s: %w", redact(j.url), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusPartialContent {
		return 0, fmt.Errorf("download %s: HTTP %s", redact(j.url), resp.Status)
	}
	var body io.Reader = resp.Body
	if j.size >= 0 {
		body = io.LimitReader(resp.Body, j.size+1) // one extra byte reveals an oversized body
	}
	n, sum, err := a.saveFile(ctx, tmp, body)
	// Errors never give a size or digest of what was downloaded: whoever
	// chose the URL would learn them.
	if err != nil {
		return n, fmt.Errorf("download %s: %w", redact(j.url), err)
	}
	if j.size >= 0 && n != j.size {
		return n, fmt.Errorf("download %s: the body does not match the expected size of %d bytes", redact(j.url), j.size)
	}
	if sum != j.sha256 {
		return n, fmt.Errorf("download %s: the body does not match the expected sha256 %s", redact(j.url), j.sha256)
	}
	return n, a.publishDownload(tmp, final, j, cf)
}

// publishDownload renames the verified, synced tmp onto final and records
// its sha256 (and its chunk index, when there is one) beside it.
func (a *Agent) publishDownload(tmp, final string, j *artifactJob, cf *chunkFetch) error {
	// present trusts the sidecar without hashing, so the old one goes (for
	// good, the directory synced) before new bytes take the name; a crash
	// before the new one is written leaves none, and the next call hashes.
	if err := os.Remove(sidecar(final)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := removeStale(final); err != nil {
		return err
	}
	if err := syncDir(filepath.Dir(final)); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	if err := syncDir(filepath.Dir(final)); err != nil {
		return err
	}
	if err := a.writeFileAtomic(sidecar(final), []byte(j.sha256+"\n")); err != nil {
		return err
	}
	cf.keepIndex(final)
	return nil
}

// DestroyImage deletes the artifact's directory under every instance type.
// A missing artifact is success: the call is a cleanup.
func (s imagesServer) DestroyImage(ctx context.Context, req *cubeletpb.DestroyImageRequest) (*cubeletpb.DestroyImageResponse, error) {
	a := s.a
	resp := &cubeletpb.DestroyImageResponse{RequestID: req.GetRequestID()}
	aid := req.GetSpec().GetImage()
	log := a.log.With("rpc", "DestroyImage", "request_id", req.GetRequestID(), "artifact_id", aid)
	if err := checkName("artifact id", aid); err != nil {
		log.Warn("bad request", "err", err)
		resp.Ret = fail(cubeletpb.ErrorCode_InvalidParamFormat, "node %s: DestroyImage: %v", a.cfg.NodeID, err)
		return resp, nil
	}
	unlock, err := a.locks.lock(ctx, "artifact/"+aid)
	if err != nil {
		log.Warn("destroy image abandoned", "err", err)
		resp.Ret = fail(cubeletpb.ErrorCode_DestroyImageFailed, "node %s: DestroyImage %s: %v", a.cfg.NodeID, aid, err)
		return resp, nil
	}
	defer unlock()
	removed, err := a.removeArtifact(aid)
	if err != nil {
		log.Error("destroy image failed", "err", err)
		resp.Ret = fail(cubeletpb.ErrorCode_DestroyImageFailed, "node %s: DestroyImage %s: %v", a.cfg.NodeID, aid, err)
		return resp, nil
	}
	if len(removed) == 0 {
		log.Info("artifact not present, nothing to remove")
		resp.Ret = &cubeletpb.Ret{RetCode: cubeletpb.ErrorCode_Success, RetMsg: "image not found on node, nothing to remove"}
		return resp, nil
	}
	log.Info("artifact removed", "paths", removed)
	resp.Ret = ok()
	return resp, nil
}

// removeArtifact deletes <data>/<type>/<aid> for every instance type.
func (a *Agent) removeArtifact(aid string) ([]string, error) {
	entries, err := os.ReadDir(a.cfg.DataDir)
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, e := range entries {
		if !e.IsDir() || checkInstanceType(e.Name()) != nil {
			continue
		}
		p := filepath.Join(a.cfg.DataDir, e.Name(), aid)
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			return removed, err
		}
		removed = append(removed, p)
	}
	return removed, nil
}

// writeFileAtomic writes data to p through a synced temporary file and a
// rename, so readers see the old content or the new, never a torn file.
func (a *Agent) writeFileAtomic(p string, data []byte) (err error) {
	tmp := p + ".tmp"
	f, err := a.createFile(tmp)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		return err
	}
	return syncDir(filepath.Dir(p))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
