package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/cubeapi"
	"github.com/cubesandbox/templatecenter/core"
)

// artifactProbe answers templates.Config.ArtifactExists for redo by asking
// the data plane's download route itself: HEAD
// <TC>/cube/template/artifact/download?artifact_id=A with the artifact's
// download token. The master has no artifact store of its own (the store
// may be a directory on the data plane's host), and this route is exactly
// what nodes will use, so its answer is the one that matters:
//
//   - 2xx: the row is READY and the bytes are in the store;
//   - 404: the bytes (or the row) are gone, so redo rebuilds;
//   - anything else (403 after a concurrent token rotation, 5xx, no
//     answer): an error, and the redo fails with it rather than guessing.
//
// Two cases cannot be asked and are trusted as present: a row that is not
// READY (CLEANUP_PENDING: the route answers 404 for any non-READY row, but
// the data plane deletes bytes and row together, so the bytes are still
// there) and a row without a download token (never distributed; the route
// would refuse it). If the bytes are missing after all, distribution fails
// with the node's download error and the next redo rebuilds.
type artifactProbe struct {
	base   string // the data plane's base URL, no trailing slash
	client *http.Client
}

func newArtifactProbe(base string) *artifactProbe {
	return &artifactProbe{base: base, client: &http.Client{Timeout: 10 * time.Second}}
}

// Exists implements templates.Config.ArtifactExists.
func (p *artifactProbe) Exists(ctx context.Context, a *core.Artifact) (bool, error) {
	if a.Status != core.ArtifactReady || a.DownloadToken == "" {
		return true, nil
	}
	u := p.base + cubeapi.PathDownload + "?" + url.Values{"artifact_id": {a.ArtifactID}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, u, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set(core.DownloadTokenHeader, a.DownloadToken)
	resp, err := p.client.Do(req)
	if err != nil {
		return false, fmt.Errorf("ask the template center whether artifact %s exists: %w", a.ArtifactID, err)
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return true, nil
	case resp.StatusCode == http.StatusNotFound:
		return false, nil
	}
	return false, fmt.Errorf("ask the template center whether artifact %s exists: HEAD answered %s", a.ArtifactID, resp.Status)
}

// envdLoader returns templates.Config.Envd for <dir>/envd, or nil when no
// such file exists: then requests that opt in to envd injection are refused
// with a message saying no envd binary is configured. The file is read at
// each use, so replacing it needs no restart.
func envdLoader(dir string, log *slog.Logger) func() ([]byte, error) {
	if dir == "" {
		log.Info("envd injection disabled: CUBE_MASTER_ENVD_HOST_DIR is empty")
		return nil
	}
	p := filepath.Join(dir, "envd")
	st, err := os.Stat(p)
	if err != nil || !st.Mode().IsRegular() {
		log.Info("envd injection disabled: no envd binary", "path", p)
		return nil
	}
	log.Info("envd injection available", "path", p, "bytes", st.Size())
	return func() ([]byte, error) { return os.ReadFile(p) }
}
