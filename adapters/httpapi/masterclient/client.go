package masterclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/internal/retry"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/metrics"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/wire"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Retry schedule (upstream reporter).
const (
	ProgressAttempts   = 6
	EndOfBuildAttempts = 12
	InitialBackoff     = 500 * time.Millisecond
	MaxBackoff         = 5 * time.Second
	AttemptTimeout     = 10 * time.Second
)

// Config configures a Client.
type Config struct {
	// BaseURL is CUBE_MASTER_ADDR ("http://host:port"; a bare host:port
	// gets http://).
	BaseURL string
	// Token is CUBE_TEMPLATE_CALLBACK_TOKEN; empty sends no header (only
	// useful against a master in insecure mode).
	Token string
	// HTTPClient defaults to a client with no overall timeout (each attempt
	// has its own).
	HTTPClient *http.Client
	// AttemptTimeout defaults to AttemptTimeout.
	AttemptTimeout time.Duration
	// Sleep waits between attempts; tests replace it. Defaults to a real,
	// context-aware sleep.
	Sleep   func(ctx context.Context, d time.Duration) error
	Logger  *slog.Logger
	Metrics *metrics.Metrics
	// Upstream, when set, fills in what an upstream master needs from a
	// BUILT report and this one does not read: nil for a master of ours.
	Upstream *UpstreamPeer
}

// UpstreamPeer describes the artifact to an upstream master, which
// distributes the file at ext4_path itself, or the presigned artifact_url
// when one is sent.
type UpstreamPeer struct {
	// LocalPath is the file the artifact store keeps the bytes in ("" for
	// remote stores). An upstream master accepts it only inside its
	// artifact roots (CUBEMASTER_ROOTFS_ARTIFACT_STORE_DIR, default
	// /data/CubeMaster/storage), so the store must be that directory.
	LocalPath func(a *core.Artifact) string
	// SignURL mints a presigned GET URL; nil or core.ErrUnsupported
	// (file stores) sends none.
	SignURL func(ctx context.Context, a *core.Artifact) (string, error)
}

// Client implements ports.StatusReporter.
type Client struct {
	base     string
	token    string
	hc       *http.Client
	timeout  time.Duration
	sleep    func(ctx context.Context, d time.Duration) error
	log      *slog.Logger
	metrics  *metrics.Metrics
	upstream *UpstreamPeer
}

var _ ports.StatusReporter = (*Client)(nil)

// New checks cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	base, err := wire.ParseBaseURL("CUBE_MASTER_ADDR", cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	c := &Client{base: base, token: strings.TrimSpace(cfg.Token), hc: cfg.HTTPClient, timeout: cfg.AttemptTimeout,
		sleep: cfg.Sleep, log: cfg.Logger, metrics: cfg.Metrics, upstream: cfg.Upstream}
	if c.hc == nil {
		c.hc = &http.Client{}
	}
	if c.timeout <= 0 {
		c.timeout = AttemptTimeout
	}
	if c.sleep == nil {
		c.sleep = retry.Sleep
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c, nil
}

// Report posts one status report, retrying as the package doc says. The
// error of a final failure wraps the last attempt's (a *wire.StatusError
// for HTTP answers, so errors.Is works with core's sentinels).
func (c *Client) Report(ctx context.Context, jobID string, r ports.StatusReport) error {
	if err := wire.ValidateID("job_id", jobID); err != nil {
		return err
	}
	body := wire.EncodeStatusReport(r)
	c.forUpstream(ctx, &body, r.Artifact)
	payload, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("encode status report for job %s: %w", jobID, err)
	}
	policy := retry.Policy{Attempts: ProgressAttempts, Initial: InitialBackoff, Max: MaxBackoff}
	if body.EndsBuild() {
		policy.Attempts = EndOfBuildAttempts
	}
	url := c.base + wire.JobStatusPath(jobID)
	op := fmt.Sprintf("report job %s status %s", jobID, body.Status)
	for n := 1; ; n++ {
		retryable, err := c.attempt(ctx, url, op, payload)
		if err == nil {
			c.metrics.Callback(metrics.CallbackDelivered)
			return nil
		}
		if !retryable || n >= policy.Attempts || ctx.Err() != nil {
			c.metrics.Callback(metrics.CallbackDropped)
			return fmt.Errorf("%s: giving up after attempt %d of %d: %w", op, n, policy.Attempts, err)
		}
		c.metrics.Callback(metrics.CallbackRetried)
		delay := policy.Delay(n)
		c.log.WarnContext(ctx, "status report failed; retrying", "job_id", jobID, "status", body.Status,
			"attempt", n, "of", policy.Attempts, "retry_in", delay, "err", err)
		if err := c.sleep(ctx, delay); err != nil {
			c.metrics.Callback(metrics.CallbackDropped)
			return fmt.Errorf("%s: interrupted after attempt %d: %w", op, n, err)
		}
	}
}

// attempt makes one POST; retryable says whether another may help.
func (c *Client) attempt(ctx context.Context, url, op string, payload []byte) (retryable bool, err error) {
	actx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		return false, fmt.Errorf("%s: %w", op, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set(auth.Header, c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		// Transport errors (including this attempt's timeout) are retried
		// unless the caller gave up.
		return ctx.Err() == nil, fmt.Errorf("%s: %w", op, err)
	}
	defer wire.Drain(resp)
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return false, nil
	}
	se := wire.ReadStatusError(op, resp)
	return se.Retryable(), se
}

// forUpstream adds ext4_path and artifact_url to a BUILT report for an
// upstream master. A URL that cannot be minted is left out (the master then
// serves ext4_path itself) and logged.
func (c *Client) forUpstream(ctx context.Context, body *wire.StatusReport, a *core.Artifact) {
	if c.upstream == nil || a == nil {
		return
	}
	if body.Ext4Path == "" && c.upstream.LocalPath != nil {
		body.Ext4Path = c.upstream.LocalPath(a)
	}
	if c.upstream.SignURL == nil {
		return
	}
	u, err := c.upstream.SignURL(ctx, a)
	switch {
	case err == nil:
		body.ArtifactURL = u
	case !errors.Is(err, core.ErrUnsupported):
		c.log.WarnContext(ctx, "no artifact_url for the upstream master", "artifact_id", a.ArtifactID, "err", err)
	}
}

// IsFinal reports whether err came from an answer retrying cannot change
// (a 4xx other than 429).
func IsFinal(err error) bool {
	var se *wire.StatusError
	return errors.As(err, &se) && !se.Retryable()
}
