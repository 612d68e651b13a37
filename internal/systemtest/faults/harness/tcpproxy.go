package harness

import (
	"io"
	"net"
	"sync"
	"testing"
)

// TCPProxy forwards connections from Addr to a target. Paused, it keeps
// accepting but moves no byte in either direction (a hung peer); Sever
// closes every connection (a dropped network).
type TCPProxy struct {
	Addr   string
	target string
	ln     net.Listener

	mu     sync.Mutex
	paused bool
	resume chan struct{}
	conns  map[net.Conn]struct{}
	closed bool
	// Accepted counts connections.
	accepted int
}

// NewTCPProxy listens on a free loopback port; it closes with the test.
func NewTCPProxy(t testing.TB, target string) *TCPProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &TCPProxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}, resume: make(chan struct{})}
	go p.serve()
	t.Cleanup(p.Close)
	return p
}

func (p *TCPProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.accepted++
		p.mu.Unlock()
		go p.handle(c)
	}
}

func (p *TCPProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *TCPProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *TCPProxy) handle(in net.Conn) {
	if !p.track(in) {
		return
	}
	defer p.untrack(in)
	p.gate()
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	out, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	if !p.track(out) {
		return
	}
	defer p.untrack(out)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(out, in); out.Close() }()
	go func() { defer wg.Done(); p.pipe(in, out); in.Close() }()
	wg.Wait()
}

// pipe copies src to dst, holding each chunk while the proxy is paused.
func (p *TCPProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}

// gate blocks while paused.
func (p *TCPProxy) gate() {
	for {
		p.mu.Lock()
		paused, ch, closed := p.paused, p.resume, p.closed
		p.mu.Unlock()
		if !paused || closed {
			return
		}
		<-ch
	}
}

// Pause stops all traffic (connections stay open).
func (p *TCPProxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.paused {
		p.paused = true
		p.resume = make(chan struct{})
	}
}

// Resume lets traffic flow again.
func (p *TCPProxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused {
		p.paused = false
		close(p.resume)
	}
}

// Sever closes every open connection.
func (p *TCPProxy) Sever() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Accepted is the number of connections accepted so far.
func (p *TCPProxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Close stops the proxy and closes its connections.
func (p *TCPProxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	if p.paused {
		p.paused = false
		close(p.resume)
	}
	p.mu.Unlock()
	p.ln.Close()
	p.Sever()
}

// retarget sends the connections accepted from now on to target.
func (p *TCPProxy) retarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}
