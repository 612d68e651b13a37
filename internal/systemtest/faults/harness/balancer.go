package harness

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// Balancer stands in for a Service in front of replicas: requests go
// round-robin (builds only, when BuildsOnly) to the replicas that accept
// connections. It records which replica took each build and can pin builds
// to one replica.
type Balancer struct {
	URL  string
	urls []string
	// BuildsOnly round-robins only POST .../build; other requests go to the
	// first replica up (the data plane's reads are stateless anyway).
	BuildsOnly bool

	mu     sync.Mutex
	next   int
	pin    int
	builds []int
}

// NewBalancer serves on a free port; it closes with the test.
func NewBalancer(t testing.TB, urls []string) *Balancer {
	t.Helper()
	b := &Balancer{urls: urls, pin: -1}
	s := httptest.NewServer(b)
	t.Cleanup(s.Close)
	b.URL = s.URL
	return b
}

// Pin sends every build to replica i (-1: round-robin again).
func (b *Balancer) Pin(i int) {
	b.mu.Lock()
	b.pin = i
	b.mu.Unlock()
}

// Builds lists the replicas that took builds, in order.
func (b *Balancer) Builds() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.builds...)
}

// LastBuild is the replica that took the last build (-1 if none).
func (b *Balancer) LastBuild() int {
	bs := b.Builds()
	if len(bs) == 0 {
		return -1
	}
	return bs[len(bs)-1]
}

func (b *Balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	isBuild := r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/build")
	rr := isBuild || !b.BuildsOnly
	start := 0
	b.mu.Lock()
	switch {
	case isBuild && b.pin >= 0:
		start = b.pin
	case rr:
		start = b.next
		b.next = (b.next + 1) % len(b.urls)
	}
	b.mu.Unlock()
	for i := range b.urls {
		idx := (start + i) % len(b.urls)
		target, _ := url.Parse(b.urls[idx])
		conn, err := net.DialTimeout("tcp", target.Host, time.Second)
		if err != nil {
			continue
		}
		conn.Close()
		if isBuild {
			b.mu.Lock()
			b.builds = append(b.builds, idx)
			b.mu.Unlock()
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp := httputil.NewSingleHostReverseProxy(target)
		rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, "replica failed: "+err.Error(), http.StatusBadGateway)
		}
		rp.ServeHTTP(w, r)
		return
	}
	http.Error(w, "no replica is up", http.StatusBadGateway)
}

// CallbackAction is what the callback proxy does with one status report.
type CallbackAction int

// Callback actions.
const (
	// Pass forwards the report.
	Pass CallbackAction = iota
	// Drop answers 503 without forwarding (the sender retries): a lost
	// report.
	Drop
	// Duplicate forwards the report twice and answers with the second
	// answer.
	Duplicate
)

// Callback is one status report the data plane sent.
type Callback struct {
	At     time.Time
	JobID  string
	Status string
	Phase  string
	Body   []byte
	Header http.Header
	Action CallbackAction
	// Code and Answer are what the master answered (0 if not forwarded).
	Code   int
	Answer string
}

// CallbackProxy sits between the data plane and the master(s) and sees
// every status report (POST /internal/template/jobs/{id}/status).
type CallbackProxy struct {
	URL  string
	next http.Handler
	// Decide picks the action for a report (nil: Pass).
	Decide func(Callback) CallbackAction
	// After runs once a forwarded report was answered, before the answer
	// goes back to the data plane.
	After func(Callback)

	mu  sync.Mutex
	log []Callback
}

// NewCallbackProxy forwards to next; it closes with the test.
func NewCallbackProxy(t testing.TB, next http.Handler) *CallbackProxy {
	t.Helper()
	p := &CallbackProxy{next: next}
	s := httptest.NewServer(p)
	t.Cleanup(s.Close)
	p.URL = s.URL
	return p
}

// Set replaces the hooks (nil, nil: pass everything).
func (p *CallbackProxy) Set(decide func(Callback) CallbackAction, after func(Callback)) {
	p.mu.Lock()
	p.Decide, p.After = decide, after
	p.mu.Unlock()
}

// Log returns the reports seen so far.
func (p *CallbackProxy) Log() []Callback {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Callback(nil), p.log...)
}

// Of returns the reports of one job.
func (p *CallbackProxy) Of(jobID string) []Callback {
	var out []Callback
	for _, c := range p.Log() {
		if c.JobID == jobID {
			out = append(out, c)
		}
	}
	return out
}

func (p *CallbackProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	cb := Callback{At: time.Now(), Body: body, Header: r.Header.Clone()}
	if strings.HasPrefix(r.URL.Path, "/internal/template/jobs/") {
		cb.JobID = strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/internal/template/jobs/"), "/status")
		var s struct{ Status, Phase string }
		json.Unmarshal(body, &s)
		cb.Status, cb.Phase = s.Status, s.Phase
	}
	p.mu.Lock()
	decide, after := p.Decide, p.After
	p.mu.Unlock()
	if decide != nil && cb.JobID != "" {
		cb.Action = decide(cb)
	}
	forward := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := r.Clone(r.Context())
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		p.next.ServeHTTP(rec, req)
		return rec
	}
	var rec *httptest.ResponseRecorder
	switch cb.Action {
	case Drop:
		http.Error(w, "injected: report lost", http.StatusServiceUnavailable)
		cb.Code = http.StatusServiceUnavailable
		p.mu.Lock()
		p.log = append(p.log, cb)
		p.mu.Unlock()
		return
	case Duplicate:
		forward()
		rec = forward()
	default:
		rec = forward()
	}
	cb.Code, cb.Answer = rec.Code, rec.Body.String()
	p.mu.Lock()
	p.log = append(p.log, cb)
	p.mu.Unlock()
	if after != nil && cb.JobID != "" {
		after(cb)
	}
	for k, vs := range rec.Header() {
		w.Header()[k] = vs
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

// Replay posts a recorded report again, with its original headers (the
// callback token), to base (a master URL) and returns the answer.
func Replay(base string, cb Callback) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, base+"/internal/template/jobs/"+cb.JobID+"/status", bytes.NewReader(cb.Body))
	if err != nil {
		return 0, "", err
	}
	req.Header = cb.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}
