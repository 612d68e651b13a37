package startup

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestHTTPServerDefaults(t *testing.T) {
	srv := HTTPServer(http.NotFoundHandler(), ServerTimeouts{})
	d := DefaultServerTimeouts
	if srv.ReadHeaderTimeout != d.ReadHeader || srv.ReadTimeout != d.Read || srv.IdleTimeout != d.Idle {
		t.Fatalf("timeouts %v/%v/%v, want %+v", srv.ReadHeaderTimeout, srv.ReadTimeout, srv.IdleTimeout, d)
	}
	if d.ReadHeader <= 0 || d.Read <= 0 || d.Idle <= 0 {
		t.Fatalf("a default timeout is unset: %+v", d)
	}
	if srv.WriteTimeout != 0 {
		t.Fatalf("write timeout %v would cap artifact downloads", srv.WriteTimeout)
	}
	// Upstream kept idle keep-alive connections 360 s; with many clients
	// that holds descriptors for nothing.
	if d.Idle > time.Minute {
		t.Fatalf("idle timeout %v, want at most a minute", d.Idle)
	}
}

// short are timeouts small enough for a test; the assertions below never
// measure time, they only wait (at most waitFor) for the server to act.
var short = ServerTimeouts{ReadHeader: 200 * time.Millisecond, Read: 400 * time.Millisecond, Idle: 200 * time.Millisecond}

const waitFor = 20 * time.Second

// serve starts HTTPServer(h, short) on loopback.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := HTTPServer(h, short)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// trickle writes s one byte at a time until the server closes the
// connection; it reports whether the whole of s got through.
func trickle(c net.Conn, s string, stop <-chan struct{}) bool {
	for i := range len(s) {
		select {
		case <-stop:
			return false
		case <-time.After(50 * time.Millisecond):
		}
		if _, err := c.Write([]byte{s[i]}); err != nil {
			return false
		}
	}
	return true
}

// closedByServer waits until a read on c ends (the server hung up or
// answered and hung up) and returns what was read.
func closedByServer(t *testing.T, c net.Conn) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(waitFor))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the connection open for %v", waitFor)
	}
	return string(b)
}

// A client that sends its headers a byte at a time never reaches the
// handler: the server hangs up once the header timeout passes.
func TestSlowHeadersAreCutOff(t *testing.T) {
	var reached atomic.Bool
	addr := serve(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached.Store(true) }))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stop := make(chan struct{})
	defer close(stop)
	// Far more header bytes than the timeout lets through at 20 a second.
	headers := "GET / HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-Slow: "+strings.Repeat("a", 40)+"\r\n", 20) + "\r\n"
	done := make(chan bool, 1)
	go func() { done <- trickle(c, headers, stop) }()
	closedByServer(t, c)
	if <-done {
		t.Fatal("every header byte was accepted")
	}
	if reached.Load() {
		t.Fatal("the handler ran for a request whose headers never finished")
	}
}

// A client that sends a body a byte at a time is cut off by the read
// timeout: the handler's read fails instead of waiting for ever.
func TestSlowBodyIsCutOff(t *testing.T) {
	readErr := make(chan error, 1)
	addr := serve(t, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
	}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := strings.Repeat("{", 1000)
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go trickle(c, body, stop)
	select {
	case err := <-readErr:
		if err == nil {
			t.Fatal("the whole trickled body was read")
		}
	case <-time.After(waitFor):
		t.Fatalf("the handler was still reading after %v", waitFor)
	}
	closedByServer(t, c)
}

// A keep-alive connection with no next request is closed.
func TestIdleConnectionsAreClosed(t *testing.T) {
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Close {
		t.Fatalf("status %d close=%v", resp.StatusCode, resp.Close)
	}
	_ = c.SetReadDeadline(time.Now().Add(waitFor))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("an idle keep-alive connection was not closed: %v", err)
	}
}

// TestConnectionLimit: with a limit of two, a third client is not served
// while two connections are open, and is served once one closes. Its
// connection waits in the kernel's backlog, taking no descriptor of the
// server's. The half-second wait only gives a broken limit the chance to
// show; a working one never serves the third early, however slow the
// machine.
func TestConnectionLimit(t *testing.T) {
	entered, release := make(chan struct{}, 8), make(chan struct{})
	srv := HTTPServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		entered <- struct{}{}
		<-release
		io.WriteString(w, "ok")
	}), short)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(LimitConnections(srv, ln, 2))
	t.Cleanup(func() { srv.Close() })

	request := func() net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		return c
	}
	waitEntered := func(what string) {
		t.Helper()
		select {
		case <-entered:
		case <-time.After(waitFor):
			t.Fatalf("%s was not served within %v", what, waitFor)
		}
	}
	first := request()
	request()
	waitEntered("the first connection")
	waitEntered("the second connection")
	request()
	select {
	case <-entered:
		t.Fatal("a third connection was served while two were open")
	case <-time.After(500 * time.Millisecond):
	}
	// One of the two is answered and closes (Connection: close).
	release <- struct{}{}
	waitEntered("the third connection, after one closed")
	close(release)
	if got := closedByServer(t, first); !strings.Contains(got, "ok") {
		t.Fatalf("first answer: %q", got)
	}
}
