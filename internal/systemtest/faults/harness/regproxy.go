package harness

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// FaultKind is what a registry proxy rule does to a request.
type FaultKind string

// Registry faults.
const (
	// FaultStatus answers Status without asking the registry (5xx, or 429
	// with RetryAfter).
	FaultStatus FaultKind = "status"
	// FaultTruncate sends the first Offset bytes of the body, then drops the
	// connection.
	FaultTruncate FaultKind = "truncate"
	// FaultCorrupt flips the byte at Offset (a body of the right size with
	// the wrong digest).
	FaultCorrupt FaultKind = "corrupt"
	// FaultSlow sends the body in Chunk-byte pieces Delay apart.
	FaultSlow FaultKind = "slow"
	// FaultStall answers nothing until Release (or the client gives up).
	FaultStall FaultKind = "stall"
)

// Target selects the requests a rule applies to.
type Target string

// Targets.
const (
	Blobs     Target = "blob"
	Manifests Target = "manifest"
)

// Rule is one registry fault.
type Rule struct {
	Target Target
	// Digest, when set, limits the rule to one blob or manifest digest.
	Digest string
	// Repo, when set, limits the rule to paths containing it.
	Repo string
	// Times is how many matching requests get the fault; 0 means all.
	Times int
	Kind  FaultKind
	// Status and RetryAfter for FaultStatus.
	Status     int
	RetryAfter string
	// Offset for FaultTruncate and FaultCorrupt.
	Offset int64
	// Chunk and Delay for FaultSlow.
	Chunk int
	Delay time.Duration

	hits int
}

// RegRequest is one request the registry proxy saw.
type RegRequest struct {
	At     time.Time
	Method string
	Path   string
	Target Target
	Digest string
	Range  string
	Status int
	Fault  FaultKind
	// PID is the client process (one of the proxy's Owners), or 0.
	PID int
}

// RegistryProxy sits between the data plane and the registry and injects
// the faults of its rules; it records every request, with the process that
// made it.
type RegistryProxy struct {
	// Addr is host:port; image references name it as their registry.
	Addr     string
	upstream string
	client   *http.Client
	// Owners, when set, lists the pids requests may come from (to tell
	// data-plane replicas apart).
	Owners func() []int

	faultState[Rule, RegRequest]
}

type ownerKey struct{}

// NewRegistryProxy proxies to the registry at upstream (host:port, plain
// HTTP) from a free loopback port; it closes with the test.
func NewRegistryProxy(t testing.TB, upstream string) *RegistryProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &RegistryProxy{Addr: ln.Addr().String(), upstream: upstream, faultState: newFaultState[Rule, RegRequest](),
		client: &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	srv := &http.Server{Handler: p, ConnContext: func(ctx context.Context, c net.Conn) context.Context {
		if p.Owners == nil {
			return ctx
		}
		return context.WithValue(ctx, ownerKey{}, socketOwner(c.RemoteAddr(), c.LocalAddr(), p.Owners()))
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { p.Release(); srv.Close() })
	return p
}

// Add appends a rule (rules are tried in order; the first that matches and
// has hits left applies) and returns a function that removes it again
// (releasing what it stalled).
func (p *RegistryProxy) Add(r Rule) (remove func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rr := &r
	p.rules = append(p.rules, rr)
	return func() {
		p.mu.Lock()
		for i, x := range p.rules {
			if x == rr {
				p.rules = append(p.rules[:i:i], p.rules[i+1:]...)
				break
			}
		}
		p.mu.Unlock()
		if rr.Kind == FaultStall {
			p.Release()
		}
	}
}

// BlobGets counts full or ranged GETs of blob digest (all digests if "")
// that reached the registry, per client pid.
func (p *RegistryProxy) BlobGets(digest string) map[int]int {
	out := map[int]int{}
	for _, r := range p.Requests() {
		if r.Target == Blobs && r.Method == http.MethodGet && (digest == "" || r.Digest == digest) {
			out[r.PID]++
		}
	}
	return out
}

func classify(path string) (Target, string) {
	if i := strings.LastIndex(path, "/blobs/"); i >= 0 {
		return Blobs, path[i+len("/blobs/"):]
	}
	if i := strings.LastIndex(path, "/manifests/"); i >= 0 {
		return Manifests, path[i+len("/manifests/"):]
	}
	return "", ""
}

func (p *RegistryProxy) match(r *http.Request, target Target, dg string) (Rule, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ru := range p.rules {
		if ru.Target != "" && ru.Target != target {
			continue
		}
		if ru.Digest != "" && ru.Digest != dg {
			continue
		}
		if ru.Repo != "" && !strings.Contains(r.URL.Path, ru.Repo) {
			continue
		}
		// Faults on bodies only make sense for GETs; HEADs pass.
		if ru.Kind != FaultStatus && ru.Kind != FaultStall && r.Method != http.MethodGet {
			continue
		}
		if ru.Times > 0 && ru.hits >= ru.Times {
			continue
		}
		ru.hits++
		return *ru, true
	}
	return Rule{}, false
}

func (p *RegistryProxy) record(rr RegRequest) {
	p.mu.Lock()
	p.reqs = append(p.reqs, rr)
	p.mu.Unlock()
}

func (p *RegistryProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	target, dg := classify(r.URL.Path)
	rr := RegRequest{At: time.Now(), Method: r.Method, Path: r.URL.Path, Target: target, Digest: dg, Range: r.Header.Get("Range")}
	if pid, ok := r.Context().Value(ownerKey{}).(int); ok {
		rr.PID = pid
	}
	rule, faulty := p.match(r, target, dg)
	if faulty {
		rr.Fault = rule.Kind
	}
	defer func() { p.record(rr) }()
	switch {
	case faulty && rule.Kind == FaultStatus:
		if rule.RetryAfter != "" {
			w.Header().Set("Retry-After", rule.RetryAfter)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rule.Status)
		fmt.Fprintf(w, `{"errors":[{"code":"UNAVAILABLE","message":"injected %d"}]}`, rule.Status)
		rr.Status = rule.Status
		return
	case faulty && rule.Kind == FaultStall:
		p.mu.Lock()
		ch := p.release
		p.mu.Unlock()
		select {
		case <-ch:
		case <-r.Context().Done():
			rr.Status = -1
			return
		}
	}
	up, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+p.upstream+r.URL.RequestURI(), r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	up.Header = r.Header.Clone()
	up.ContentLength = r.ContentLength
	resp, err := p.client.Do(up)
	if err != nil {
		rr.Status = http.StatusBadGateway
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	rr.Status = resp.StatusCode
	w.WriteHeader(resp.StatusCode)
	if !faulty || resp.StatusCode/100 != 2 {
		io.Copy(w, resp.Body)
		return
	}
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	switch rule.Kind {
	case FaultTruncate:
		io.CopyN(w, resp.Body, rule.Offset)
		flush()
		// Drop the connection mid-body.
		panic(http.ErrAbortHandler)
	case FaultCorrupt:
		if _, err := io.CopyN(w, resp.Body, rule.Offset); err != nil {
			return
		}
		var b [1]byte
		if n, _ := resp.Body.Read(b[:]); n == 1 {
			b[0] ^= 0xff
			w.Write(b[:])
		}
		io.Copy(w, resp.Body)
	case FaultSlow:
		buf := make([]byte, max(rule.Chunk, 1))
		for {
			n, err := io.ReadFull(resp.Body, buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil {
					return
				}
				flush()
			}
			if err != nil {
				return
			}
			select {
			case <-time.After(rule.Delay):
			case <-r.Context().Done():
				return
			}
		}
	default:
		io.Copy(w, resp.Body)
	}
}
