package tcclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/internal/retry"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Defaults.
const (
	DefaultAttempts      = 3
	DefaultSubmitTimeout = 30 * time.Second
	DefaultDeleteTimeout = 30 * time.Second
	InitialBackoff       = 200 * time.Millisecond
	MaxBackoff           = 2 * time.Second
)

// Config configures a Client.
type Config struct {
	// BaseURL is CUBE_TEMPLATE_CENTER_ADDR (a bare host:port gets http://).
	BaseURL string
	// Token is CUBE_TEMPLATE_CALLBACK_TOKEN; empty sends no header.
	Token string
	// HTTPClient defaults to a client on a clone of http.DefaultTransport
	// (which waits for "100 Continue" before sending upload bodies).
	HTTPClient *http.Client
	// Attempts bounds tries of retryable calls (default 3).
	Attempts int
	// SubmitTimeout and DeleteTimeout bound each attempt (default 30 s).
	// Uploads are bounded only by the caller's context.
	SubmitTimeout time.Duration
	DeleteTimeout time.Duration
	// Sleep waits between attempts; tests replace it.
	Sleep  func(ctx context.Context, d time.Duration) error
	Logger *slog.Logger
}

// Client implements ports.DataPlane.
type Client struct {
	cfg  Config
	base string
	hc   *http.Client
	log  *slog.Logger
}

var _ ports.DataPlane = (*Client)(nil)

// New checks cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	base, err := wire.ParseBaseURL("CUBE_TEMPLATE_CENTER_ADDR", cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	cfg.Token = strings.TrimSpace(cfg.Token)
	if cfg.Attempts <= 0 {
		cfg.Attempts = DefaultAttempts
	}
	if cfg.SubmitTimeout <= 0 {
		cfg.SubmitTimeout = DefaultSubmitTimeout
	}
	if cfg.DeleteTimeout <= 0 {
		cfg.DeleteTimeout = DefaultDeleteTimeout
	}
	if cfg.Sleep == nil {
		cfg.Sleep = retry.Sleep
	}
	c := &Client{cfg: cfg, base: base, hc: cfg.HTTPClient, log: cfg.Logger}
	if c.hc == nil {
		c.hc = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c, nil
}

func (c *Client) policy() retry.Policy {
	return retry.Policy{Attempts: c.cfg.Attempts, Initial: InitialBackoff, Max: MaxBackoff}
}

// SubmitBuild hands a PENDING job to the template center.
func (c *Client) SubmitBuild(ctx context.Context, req ports.BuildRequest) error {
	if err := wire.ValidateID("job_id", req.JobID); err != nil {
		return err
	}
	payload, err := json.Marshal(wire.NewBuildRequest(req))
	if err != nil {
		return fmt.Errorf("encode build request for job %s: %w", req.JobID, err)
	}
	op := "submit build " + req.JobID
	p := c.policy()
	for n := 1; ; n++ {
		var connected bool
		trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { connected = true }}
		resp, err := c.post(httptrace.WithClientTrace(ctx, trace), c.cfg.SubmitTimeout, wire.PathBuild, payload)
		if err == nil {
			return c.result(op, resp)
		}
		// Without a connection the request cannot have reached the TC, so
		// a retry cannot start the build twice. Anything later is ambiguous.
		if connected || ctx.Err() != nil || n >= p.Attempts {
			return fmt.Errorf("%s (attempt %d of %d): %w", op, n, p.Attempts, err)
		}
		c.log.WarnContext(ctx, "template center unreachable; retrying build submit", "job_id", req.JobID, "attempt", n, "err", err)
		if err := c.cfg.Sleep(ctx, p.Delay(n)); err != nil {
			return fmt.Errorf("%s: interrupted after attempt %d: %w", op, n, err)
		}
	}
}

// DeleteArtifact asks the template center to remove the artifact's bytes
// and row; deleting a missing artifact succeeds.
func (c *Client) DeleteArtifact(ctx context.Context, artifactID string) error {
	if err := wire.ValidateID("artifact_id", artifactID); err != nil {
		return err
	}
	payload, err := json.Marshal(wire.DeleteArtifactRequest{ArtifactID: artifactID})
	if err != nil {
		return err
	}
	op := "delete artifact " + artifactID
	p := c.policy()
	for n := 1; ; n++ {
		resp, err := c.post(ctx, c.cfg.DeleteTimeout, wire.PathArtifactDelete, payload)
		retryable := ctx.Err() == nil
		if err == nil {
			err = c.result(op, resp)
			if err == nil {
				return nil
			}
			retryable = retryable && err.(*wire.StatusError).Retryable()
		} else {
			err = fmt.Errorf("%s: %w", op, err)
		}
		if !retryable || n >= p.Attempts {
			return fmt.Errorf("%s: giving up after attempt %d of %d: %w", op, n, p.Attempts, err)
		}
		if err := c.cfg.Sleep(ctx, p.Delay(n)); err != nil {
			return fmt.Errorf("%s: interrupted after attempt %d: %w", op, n, err)
		}
	}
}

// UploadArtifact streams an artifact's ext4 to the template center's store
// (migrate). body must yield exactly info.Size bytes whose sha256 is
// info.SHA256; the TC verifies both before anything becomes visible. It is
// sent once: a stream cannot be replayed, and a repeated upload of the same
// bytes is answered "exists", so callers may simply call again.
func (c *Client) UploadArtifact(ctx context.Context, artifactID string, body io.Reader, info ports.ObjectInfo) (ports.StoredObject, error) {
	if err := wire.ValidateID("artifact_id", artifactID); err != nil {
		return ports.StoredObject{}, err
	}
	q := url.Values{}
	q.Set(wire.QueryArtifactID, artifactID)
	q.Set(wire.QuerySHA256, info.SHA256)
	q.Set(wire.QuerySize, strconv.FormatInt(info.Size, 10))
	sized := &exactBody{r: body, left: info.Size, size: info.Size}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+wire.PathArtifactUpload+"?"+q.Encode(), sized)
	if err != nil {
		return ports.StoredObject{}, err
	}
	req.ContentLength = info.Size
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Expect", "100-continue")
	c.setToken(req)
	resp, err := c.hc.Do(req)
	op := "upload artifact " + artifactID
	if err != nil {
		if sized.mismatch != nil {
			return ports.StoredObject{}, fmt.Errorf("%s: %w", op, sized.mismatch)
		}
		return ports.StoredObject{}, fmt.Errorf("%s: %w", op, err)
	}
	defer wire.Drain(resp)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return ports.StoredObject{}, wire.ReadStatusError(op, resp)
	}
	var out wire.UploadResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&out); err != nil {
		return ports.StoredObject{}, fmt.Errorf("%s: decode answer: %w", op, err)
	}
	return ports.StoredObject{ObjectKey: out.ObjectKey, StorageBackend: out.StorageBackend}, nil
}

// exactBody passes an upload body through and fails it when it does not
// yield exactly size bytes. The last byte is held back until the body is
// known to end there, so the TC never receives a complete request for a
// longer body (it would verify and store its first size bytes); a short
// body ends the request early. Either way the caller gets an error wrapping
// core.ErrInvalidArgument instead of a transport error.
type exactBody struct {
	r          io.Reader
	size, left int64
	mismatch   error // set when the body's length is wrong
	err        error // returned by every later Read
}

func (b *exactBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.left == 0 {
		if b.size == 0 && b.longer() {
			return 0, b.err
		}
		return 0, io.EOF
	}
	// Stop one byte short of the end: that byte is only passed on once the
	// body is known to have nothing after it.
	if room := b.left - 1; int64(len(p)) > room {
		p = p[:max(room, 1)]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	switch {
	case b.left == 0 && b.longer():
		return 0, b.err
	case b.left == 0:
		return n, io.EOF
	case errors.Is(err, io.EOF):
		b.fail(fmt.Errorf("body ended after %d of the declared %d bytes: %w", b.size-b.left, b.size, core.ErrInvalidArgument))
		return 0, b.err
	}
	return n, err
}

// longer reports whether the body goes on past size (then b.err is set).
func (b *exactBody) longer() bool {
	var one [1]byte
	n, err := io.ReadFull(b.r, one[:])
	switch {
	case n > 0:
		b.fail(fmt.Errorf("body is longer than the declared %d bytes: %w", b.size, core.ErrInvalidArgument))
		return true
	case err != nil && !errors.Is(err, io.EOF):
		b.err = fmt.Errorf("read upload body: %w", err)
		return true
	}
	return false
}

func (b *exactBody) fail(err error) { b.mismatch, b.err = err, err }

// ArtifactExists asks the template center's download route itself, HEAD
// <TC>/cube/template/artifact/download?artifact_id=A with the artifact's
// download token. The master has no artifact store of its own (the store
// may be a directory on the data plane's host), and this route is exactly
// what nodes use, so its answer is the one that matters: 2xx present, 404
// absent, anything else (403 after a concurrent token rotation, 5xx, no
// answer) an error. The shared token goes along: without it the route
// answers an unknown id like a refused token (403), so that nobody can
// probe which ids exist; with it, an unknown id is 404, but it opens no
// row: a row is asked about with its own token. A row that is not READY
// cannot be asked and is reported present; a READY row without a token
// cannot be asked either, and that is an error, not a guess (see
// ports.DataPlane).
func (c *Client) ArtifactExists(ctx context.Context, a *core.Artifact) (bool, error) {
	if a.Status != core.ArtifactReady {
		return true, nil
	}
	if a.DownloadToken == "" {
		return false, fmt.Errorf("artifact %s has no download token to ask the template center with: %w", a.ArtifactID, core.ErrInvalidArgument)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.SubmitTimeout)
	defer cancel()
	u := c.base + core.DownloadPath + "?" + url.Values{"artifact_id": {a.ArtifactID}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, u, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set(core.DownloadTokenHeader, a.DownloadToken)
	c.setToken(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		return false, fmt.Errorf("ask the template center whether artifact %s exists: %w", a.ArtifactID, err)
	}
	wire.Drain(resp)
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return true, nil
	case resp.StatusCode == http.StatusNotFound:
		return false, nil
	}
	return false, fmt.Errorf("ask the template center whether artifact %s exists: HEAD answered %s", a.ArtifactID, resp.Status)
}

func (c *Client) setToken(req *http.Request) {
	if c.cfg.Token != "" {
		req.Header.Set(auth.Header, c.cfg.Token)
	}
}

// post sends one JSON POST with its own timeout. The returned response's
// body is fully read before post returns, so the timeout may end with it.
func (c *Client) post(ctx context.Context, timeout time.Duration, path string, payload []byte) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	c.setToken(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp, nil
}

// result turns a buffered answer into nil or a *wire.StatusError.
func (c *Client) result(op string, resp *http.Response) error {
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	return wire.ReadStatusError(op, resp)
}
