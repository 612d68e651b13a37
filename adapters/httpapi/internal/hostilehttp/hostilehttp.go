package hostilehttp

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Scrape is what /metrics answered after the hostile requests.
type Scrape struct {
	// Bytes is the size of the exposition.
	Bytes int
	// HTTPSeries counts the series of the HTTP collectors
	// (cube_template_http_*), histogram buckets included.
	HTTPSeries int
	// Body is the exposition itself, for messages.
	Body string
}

// MethodBytes is the length of each hostile method: large enough that a
// few of them kept as label values make a scrape megabytes long.
const MethodBytes = 256 << 10

// Flood serves h on a loopback server and sends it methods requests whose
// method is MethodBytes of random letters, then paths requests with random
// paths under each of prefixes (GET, and a standard method a route may
// not serve), and returns the scrape of metricsPath. Each request is
// written on a raw connection: net/http's client would refuse such
// methods, a server accepts them up to its header limit.
func Flood(t testing.TB, h http.Handler, metricsPath string, methods, paths int, prefixes ...string) Scrape {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	rng := rand.New(rand.NewPCG(1, 2))
	if len(prefixes) == 0 {
		prefixes = []string{"/"}
	}
	for i := range methods {
		send(t, addr, randomLetters(rng, MethodBytes), prefixes[i%len(prefixes)]+randomPath(rng))
	}
	for i := range paths {
		method := []string{http.MethodGet, http.MethodPost, http.MethodDelete, http.MethodPatch}[i%4]
		send(t, addr, method, prefixes[i%len(prefixes)]+randomPath(rng))
	}
	resp, err := http.Get(srv.URL + metricsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", metricsPath, resp.Status)
	}
	s := Scrape{Bytes: len(b), Body: string(b)}
	for line := range strings.Lines(s.Body) {
		if strings.HasPrefix(line, "cube_template_http_") {
			s.HTTPSeries++
		}
	}
	return s
}

// send writes one request on its own connection and reads the status
// line of the answer (any status: a refusal is an answer).
func send(t testing.TB, addr, method, target string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A hang guard, not a measurement: every request here is answered at
	// once.
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", method, target); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 ") {
		t.Fatalf("%.20s... %s: no answer: %q, %v", method, target, line, err)
	}
}

func randomLetters(rng *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('A' + rng.IntN(26))
	}
	return string(b)
}

// randomPath is a few random segments, some of them long.
func randomPath(rng *rand.Rand) string {
	var sb strings.Builder
	for range 1 + rng.IntN(4) {
		sb.WriteString(strings.ToLower(randomLetters(rng, 1+rng.IntN(200))))
		sb.WriteByte('/')
	}
	return strings.TrimSuffix(sb.String(), "/")
}

// SlowBody serves h on a loopback server and sends it a request that
// announces a body of 1 MiB but sends 16 bytes of it and then nothing,
// as a client trickling its body would. It returns the answer's status
// and headers, read while the body is still incomplete: a route that
// refuses the caller must answer without waiting for the body, and close
// the connection rather than read the rest. A server that waits fails the
// test when the guard deadline passes (a hang guard, not a measurement).
func SlowBody(t testing.TB, h http.Handler, method, target string, header http.Header) *http.Response {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nContent-Type: application/json\r\n", method, target, 1<<20)
	for k, vs := range header {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n{\"job_id\":\"j\",  ")
	if _, err := io.WriteString(c, b.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s %s with an unfinished body: no answer while the body is incomplete: %v", method, target, err)
	}
	resp.Body.Close()
	return resp
}
