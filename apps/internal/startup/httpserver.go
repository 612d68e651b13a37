package startup

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// ServerTimeouts bound how long a client may hold a connection of the
// HTTP servers (cubemaster's and templatecenter's) without finishing what
// it is sending, so that clients trickling bytes (slowloris) cannot pin
// connections and goroutines. Zero fields take the defaults.
//
// There is deliberately no write timeout: it would cap how long an
// artifact download may take (upstream's 360 s did). Uploads, the one
// long request body, replace the read timeout with an idle one
// (tcapi.Config.UploadIdleTimeout).
type ServerTimeouts struct {
	// ReadHeader bounds reading a request's headers.
	ReadHeader time.Duration
	// Read bounds reading a whole request, body included (upstream: 120 s).
	Read time.Duration
	// Idle bounds how long a keep-alive connection waits for the next
	// request (upstream: 360 s; CUBE_TEMPLATE_HTTP_IDLE_TIMEOUT).
	Idle time.Duration
}

// DefaultServerTimeouts are the timeouts the servers run with.
var DefaultServerTimeouts = ServerTimeouts{ReadHeader: 30 * time.Second, Read: 120 * time.Second, Idle: 60 * time.Second}

func (t ServerTimeouts) withDefaults() ServerTimeouts {
	d := DefaultServerTimeouts
	if t.ReadHeader <= 0 {
		t.ReadHeader = d.ReadHeader
	}
	if t.Read <= 0 {
		t.Read = d.Read
	}
	if t.Idle <= 0 {
		t.Idle = d.Idle
	}
	return t
}

// HTTPServer is the server both services serve their router with.
func HTTPServer(h http.Handler, t ServerTimeouts) *http.Server {
	t = t.withDefaults()
	return &http.Server{Handler: h, ReadHeaderTimeout: t.ReadHeader, ReadTimeout: t.Read, IdleTimeout: t.Idle}
}

// LimitConnections returns l for srv to serve at most n connections at
// once (CUBE_TEMPLATE_HTTP_MAX_CONNECTIONS): Accept waits while n are
// open, so further clients wait in the kernel's backlog instead of each
// taking a descriptor and a goroutine. Without it, about 20,000 idle
// connections exhausted the process's descriptors, and with them its
// database and artifact files. A slot is given back when srv reports the
// connection closed or hijacked (srv.ConnState, which it chains), so the
// connections net/http serves stay its own *net.TCPConn (sendfile and
// splice need them). n < 1 leaves l unlimited.
func LimitConnections(srv *http.Server, l net.Listener, n int) net.Listener {
	if n < 1 {
		return l
	}
	ll := &limitListener{Listener: l, slots: make(chan struct{}, n), done: make(chan struct{})}
	prev := srv.ConnState
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		if st == http.StateClosed || st == http.StateHijacked {
			<-ll.slots
		}
		if prev != nil {
			prev(c, st)
		}
	}
	return ll
}

type limitListener struct {
	net.Listener
	slots     chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return c, nil
}

// Close also ends an Accept waiting for a slot.
func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}
