package harness

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Job is the part of the public API's job view the suites read.
type Job struct {
	JobID             string           `json:"job_id"`
	TemplateID        string           `json:"template_id"`
	Status            string           `json:"status"`
	Phase             string           `json:"phase"`
	ErrorMessage      string           `json:"error_message"`
	ArtifactID        string           `json:"artifact_id"`
	ExpectedNodeCount int              `json:"expected_node_count"`
	ReadyNodeCount    int              `json:"ready_node_count"`
	FailedNodeCount   int              `json:"failed_node_count"`
	TemplateStatus    string           `json:"template_status"`
	Progress          int              `json:"progress"`
	PullTotalBytes    int64            `json:"pull_total_bytes"`
	PullDownloaded    int64            `json:"pull_downloaded_bytes"`
	PhaseDurationsMS  map[string]int64 `json:"phase_durations_ms"`
	Nodes             []struct {
		NodeID string `json:"node_id"`
		Status string `json:"status"`
		Error  string `json:"error"`
	} `json:"nodes"`
	Artifact *struct {
		SHA256 string `json:"ext4_sha256"`
		Size   int64  `json:"ext4_size_bytes"`
	} `json:"artifact"`
}

// Terminal reports whether the job is READY or FAILED.
func (j *Job) Terminal() bool { return j != nil && (j.Status == "READY" || j.Status == "FAILED") }

// Answer is one public API answer (upstream's envelope).
type Answer struct {
	HTTP int
	Ret  struct {
		Code int    `json:"ret_code"`
		Msg  string `json:"ret_msg"`
	} `json:"ret"`
	Job *Job `json:"job"`
	// Status is the template status of GET /cube/template?template_id=.
	Status string          `json:"status"`
	Raw    json.RawMessage `json:"-"`
	// Took is how long the call took.
	Took time.Duration `json:"-"`
	Err  error         `json:"-"`
}

// OK reports a 200 envelope.
func (a Answer) OK() bool { return a.Err == nil && a.Ret.Code == 200 }

func (a Answer) String() string {
	if a.Err != nil {
		return a.Err.Error()
	}
	return fmt.Sprintf("HTTP %d %s", a.HTTP, a.Raw)
}

// Client calls one master's public API.
type Client struct {
	Base string
	// Bearer is sent as Authorization: Bearer (the masters serve the
	// public API with authentication on, as in production).
	Bearer string
	HTTP   *http.Client
}

// NewClient is a client of the master at base presenting bearer.
func NewClient(base, bearer string) *Client {
	return &Client{Base: base, Bearer: bearer, HTTP: &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
}

// Call makes one request; transport errors are in Answer.Err.
func (c *Client) Call(method, path string, body any) Answer {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	start := time.Now()
	req, err := http.NewRequest(method, c.Base+path, rd)
	if err != nil {
		return Answer{Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if c.Bearer != "" {
		req.Header.Set("Authorization", "Bearer "+c.Bearer)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return Answer{Err: err, Took: time.Since(start)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	a := Answer{HTTP: resp.StatusCode, Took: time.Since(start)}
	if err != nil {
		a.Err = err
		return a
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		a.Err = fmt.Errorf("%s %s: HTTP %d %q: %v", method, path, resp.StatusCode, raw, err)
	}
	a.Raw = raw
	return a
}

// RandHex is n random bytes in hex.
func RandHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Create asks for a template from image.
func (c *Client) Create(templateID, image string) Answer {
	return c.Call(http.MethodPost, "/cube/template/from-image", map[string]any{
		"requestID": "req-" + RandHex(4), "source_image_ref": image, "template_id": templateID,
		"writable_layer_size": "1Gi",
	})
}

// Redo asks for a redo of the template.
func (c *Client) Redo(templateID string) Answer {
	return c.Call(http.MethodPost, "/cube/template/redo", map[string]any{"requestID": "redo-" + RandHex(4), "template_id": templateID})
}

// Delete deletes the template.
func (c *Client) Delete(templateID string) Answer {
	return c.Call(http.MethodDelete, "/cube/template", map[string]any{"RequestID": "del-" + RandHex(4), "template_id": templateID})
}

// Job reads a job.
func (c *Client) Job(jobID string) Answer {
	return c.Call(http.MethodGet, "/cube/template/from-image?job_id="+jobID, nil)
}

// Template reads a template.
func (c *Client) Template(templateID string) Answer {
	return c.Call(http.MethodGet, "/cube/template?template_id="+templateID, nil)
}

// WaitJob polls the job until it is terminal or timeout passes; the last
// answer is returned either way.
func (c *Client) WaitJob(jobID string, timeout time.Duration) Answer {
	return c.WaitJobUntil(jobID, timeout, func(j *Job) bool { return j.Terminal() })
}

// WaitJobUntil polls the job until done(job) or timeout.
func (c *Client) WaitJobUntil(jobID string, timeout time.Duration, done func(*Job) bool) Answer {
	deadline := time.Now().Add(timeout)
	for {
		a := c.Job(jobID)
		if a.Err == nil && a.Job != nil && done(a.Job) {
			return a
		}
		if time.Now().After(deadline) {
			return a
		}
		time.Sleep(150 * time.Millisecond)
	}
}

// WaitTemplate polls until the template has status (or timeout) and
// returns the last status seen.
func (c *Client) WaitTemplate(templateID, status string, timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	for {
		a := c.Template(templateID)
		if a.Status == status || time.Now().After(deadline) {
			return a.Status
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Metrics fetches base/metrics and returns the value of every sample whose
// name (with labels, as exposed) starts with prefix, summed.
func Metrics(base, prefix string) (float64, error) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var sum float64
	found := false
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' || !strings.HasPrefix(line, prefix) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		var v float64
		if _, err := fmt.Sscanf(line[i+1:], "%g", &v); err == nil {
			sum += v
			found = true
		}
	}
	if !found {
		return 0, fmt.Errorf("%s/metrics has no %s", base, prefix)
	}
	return sum, nil
}
