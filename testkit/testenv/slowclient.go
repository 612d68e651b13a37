package testenv

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// CheckHangsUpOnTrickle dials addr until it accepts (a service migrates its
// store before it listens), sends a GET of path one header byte every
// 50 ms, and fails t unless the server hangs up before the headers are
// done (a 400 as it hangs up is fine; the route's answer is not). who
// names the server in failures. The server must have a header timeout
// well under the two seconds the headers take.
func CheckHangsUpOnTrickle(t testing.TB, addr, path, who string) {
	t.Helper()
	var c net.Conn
	var err error
	for range 200 {
		if c, err = net.Dial("tcp", addr); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		req := "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-Slow: aaaaaaaaaaaaaaaaaaaa\r\n", 40)
		for i := range len(req) {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := c.Write([]byte{req[i]}); err != nil {
				return
			}
		}
	}()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s kept a trickling client's connection open", who)
	}
	if len(b) > 0 && !strings.HasPrefix(string(b), "HTTP/1.1 400 ") {
		t.Fatalf("%s answered a request whose headers never finished: %q", who, b)
	}
}
