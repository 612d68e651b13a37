package cubeapi

import (
	"bufio"
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// artifactTC serves data like the template center's download route:
// ranges, a Content-Length, and a plain-text 403 for unknown ids. With
// cut set it declares the whole length, sends half and drops the
// connection.
func artifactTC(t *testing.T, data []byte, cut bool) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("artifact_id") != "rfs-1" {
			http.Error(w, "unknown artifact, or a missing or wrong download token", http.StatusForbidden)
			return
		}
		if cut {
			w.Header().Set("Content-Length", strconv.Itoa(len(data)))
			w.Write(data[:len(data)/2])
			w.(http.Flusher).Flush()
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.Header().Set("ETag", `"e"`)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
	}))
	t.Cleanup(s.Close)
	return s
}

// TestDownloadProxyOverTCP runs the master's download proxy between real
// TCP connections, where the body is spliced from socket to socket.
func TestDownloadProxyOverTCP(t *testing.T) {
	data := make([]byte, 3<<20+12345)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	master := httptest.NewServer(newServer(t, &services{}, artifactTC(t, data, false).URL))
	defer master.Close()
	tests := []struct {
		name, method, id, rng string
		inm                   string // If-None-Match
		status                int
		body                  []byte
		contains              string
	}{
		{name: "not modified", method: "GET", id: "rfs-1", inm: `"e"`, status: 304, body: []byte{}},
		{name: "whole", method: "GET", id: "rfs-1", status: 200, body: data},
		{name: "range", method: "GET", id: "rfs-1", rng: "bytes=100-2000000", status: 206, body: data[100:2000001]},
		{name: "tail", method: "GET", id: "rfs-1", rng: "bytes=-10", status: 206, body: data[len(data)-10:]},
		{name: "unknown", method: "GET", id: "rfs-2", status: 403, contains: "unknown artifact"},
		{name: "head", method: "HEAD", id: "rfs-1", status: 200, body: []byte{}},
		{name: "whole again", method: "GET", id: "rfs-1", status: 200, body: data},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, master.URL+PathDownload+"?artifact_id="+tc.id+"&token=t", nil)
			if tc.rng != "" {
				req.Header.Set("Range", tc.rng)
			}
			if tc.inm != "" {
				req.Header.Set("If-None-Match", tc.inm)
			}
			resp, err := master.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != tc.status {
				t.Fatalf("status %d (err %v), want %d", resp.StatusCode, err, tc.status)
			}
			if tc.body != nil && !bytes.Equal(got, tc.body) {
				t.Fatalf("%d bytes, want %d (equal prefix: %v)", len(got), len(tc.body), bytes.HasPrefix(tc.body, got))
			}
			if tc.contains != "" && !strings.Contains(string(got), tc.contains) {
				t.Fatalf("body %q lacks %q", got, tc.contains)
			}
			if tc.method == "HEAD" && resp.ContentLength != int64(len(data)) {
				t.Fatalf("HEAD Content-Length %d", resp.ContentLength)
			}
			if tc.status == 304 && resp.Header.Get("Content-Length") != "" {
				t.Fatalf("304 carries Content-Length %q", resp.Header.Get("Content-Length"))
			}
			if (tc.status < 300 || tc.status == 304) && resp.Header.Get("ETag") != `"e"` {
				t.Fatalf("ETag %q not passed on", resp.Header.Get("ETag"))
			}
		})
	}
}

// A template center that breaks off mid-body must leave the node with a
// broken download, not a short one that reads as complete.
func TestDownloadProxyBrokenBody(t *testing.T) {
	data := bytes.Repeat([]byte("ext4"), 1<<18)
	master := httptest.NewServer(newServer(t, &services{}, artifactTC(t, data, true).URL))
	defer master.Close()
	_, got, err := getArtifact(t, master)
	if err == nil {
		t.Fatalf("read %d of %d bytes without an error", len(got), len(data))
	}
}

// rawTC is a template center that answers every request with the bytes
// answer returns, verbatim, and hands the request it read to seen.
func rawTC(t *testing.T, answer func(*http.Request) string, seen chan<- *http.Request) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				req, err := http.ReadRequest(bufio.NewReader(conn))
				if err != nil {
					return
				}
				if seen != nil {
					seen <- req
				}
				io.WriteString(conn, answer(req))
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// An interim 1xx answer before the real one (a proxy in front of the
// template center answering Expect, or sending Early Hints) must not
// become the answer: it was passed on as an empty 200.
func TestDownloadProxySkipsInterimResponses(t *testing.T) {
	body := strings.Repeat("ext4", 1000)
	tc := rawTC(t, func(*http.Request) string {
		return "HTTP/1.1 100 Continue\r\n\r\n" +
			"HTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload\r\n\r\n" +
			"HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}, nil)
	master := httptest.NewServer(newServer(t, &services{}, tc))
	defer master.Close()
	resp, got, err := getArtifact(t, master)
	if err != nil || resp.StatusCode != 200 || string(got) != body {
		t.Fatalf("status %d, %d bytes (err %v), want 200 and %d bytes", resp.StatusCode, len(got), err, len(body))
	}
}

// The proxy passes on what the ReverseProxy does: the client's own
// forwarding headers are dropped (X-Forwarded-For is the proxy's view of
// the client alone), and headers a Connection header names are hop-by-hop
// both ways.
func TestDownloadProxyHopHeaders(t *testing.T) {
	seen := make(chan *http.Request, 1)
	tc := rawTC(t, func(*http.Request) string {
		return "HTTP/1.1 200 OK\r\nConnection: X-Up-Hop\r\nX-Up-Hop: secret\r\nContent-Length: 4\r\n\r\next4"
	}, seen)
	master := httptest.NewServer(newServer(t, &services{}, tc))
	defer master.Close()
	req, _ := http.NewRequest("GET", master.URL+PathDownload+"?artifact_id=rfs-1&token=t", nil)
	req.Header.Set("X-Forwarded-For", "6.6.6.6")
	req.Header.Set("Forwarded", "for=6.6.6.6")
	req.Header.Set("Connection", "X-Hop")
	req.Header.Set("X-Hop", "1")
	resp, err := master.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(got) != "ext4" {
		t.Fatalf("status %d, body %q", resp.StatusCode, got)
	}
	if v := resp.Header.Get("X-Up-Hop"); v != "" {
		t.Errorf("the client got the template center's hop-by-hop header X-Up-Hop: %q", v)
	}
	in := <-seen
	if v := in.Header.Get("X-Forwarded-For"); v != "127.0.0.1" {
		t.Errorf("X-Forwarded-For %q, want the client's address alone", v)
	}
	for _, h := range []string{"Forwarded", "X-Hop"} {
		if v := in.Header.Get(h); v != "" {
			t.Errorf("the template center got %s: %q", h, v)
		}
	}
}

// getArtifact downloads rfs-1 through master and reads the whole answer;
// err is the body's read error.
func getArtifact(t *testing.T, master *httptest.Server) (*http.Response, []byte, error) {
	t.Helper()
	resp, err := http.Get(master.URL + PathDownload + "?artifact_id=rfs-1&token=t")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, got, err
}
