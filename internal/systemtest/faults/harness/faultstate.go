package harness

import "sync"

// faultState is what every fault proxy keeps: the rules it applies (R),
// the requests it saw (Q), and the channel stalled requests wait on.
type faultState[R, Q any] struct {
	mu      sync.Mutex
	rules   []*R
	reqs    []Q
	release chan struct{}
}

func newFaultState[R, Q any]() faultState[R, Q] {
	return faultState[R, Q]{release: make(chan struct{})}
}

// Clear removes every rule and releases stalled requests.
func (p *faultState[R, Q]) Clear() {
	p.mu.Lock()
	p.rules = nil
	p.mu.Unlock()
	p.Release()
}

// Release lets every stalled request go on.
func (p *faultState[R, Q]) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.release)
	p.release = make(chan struct{})
}

// Requests returns what the proxy saw.
func (p *faultState[R, Q]) Requests() []Q {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Q(nil), p.reqs...)
}

// Reset forgets the recorded requests.
func (p *faultState[R, Q]) Reset() {
	p.mu.Lock()
	p.reqs = nil
	p.mu.Unlock()
}
