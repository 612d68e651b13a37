package cubeapi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// spliceProxy forwards artifact GETs to a plain-HTTP template center over
// a connection of its own and copies the body from that TCP connection to
// the client's with io.Copy: net/http hands the copy to the kernel
// (splice(2)), so the gigabytes nodes download pass through the master
// without being copied into the process and out again, as the
// ReverseProxy's read and write loop does. HEAD and anything without a
// Content-Length body go through fallback, the ReverseProxy.
type spliceProxy struct {
	target   *url.URL
	rewrite  func(*httputil.ProxyRequest)
	fallback http.Handler
	log      *slog.Logger
}

// spliceHeaderTimeout bounds the wait for the template center's response
// headers; the body has no deadline (a gigabyte to a slow node takes as
// long as it takes, and the node's own timeout covers it).
const spliceHeaderTimeout = time.Minute

// hopHeaders are meant for one connection only (RFC 9110 7.6.1); the
// proxy neither forwards nor returns them.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func (p *spliceProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		p.fallback.ServeHTTP(w, r)
		return
	}
	ctx := r.Context()
	out := r.Clone(ctx)
	out.RequestURI, out.Body, out.ContentLength, out.Close = "", nil, 0, true
	dropHopHeaders(out.Header)
	// As the ReverseProxy does before its Rewrite: the client's own
	// forwarding headers are not passed on (rewrite sets X-Forwarded-*
	// from what the proxy sees). A GET has no body to continue.
	for _, h := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Expect"} {
		out.Header.Del(h)
	}
	p.rewrite(&httputil.ProxyRequest{In: r, Out: out})

	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", hostPort(p.target))
	if err != nil {
		p.fail(w, r, err)
		return
	}
	defer conn.Close()
	// A client that goes away ends the upstream read too.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	_ = conn.SetDeadline(time.Now().Add(spliceHeaderTimeout))
	if err := out.Write(conn); err != nil {
		p.fail(w, r, fmt.Errorf("send request: %w", err))
		return
	}
	br := bufio.NewReaderSize(conn, 64<<10)
	resp, err := http.ReadResponse(br, out)
	// Interim answers (100 Continue, 103 Early Hints: from a proxy in
	// front of the template center) come before the real one; passed on
	// as the answer they would be an empty 200.
	for err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
		resp, err = http.ReadResponse(br, out)
	}
	if err == nil && resp.StatusCode == http.StatusSwitchingProtocols {
		err = errors.New("the template center switched protocols on a download")
	}
	if err != nil {
		p.fail(w, r, fmt.Errorf("read response: %w", err))
		return
	}
	_ = conn.SetDeadline(time.Time{})
	dropHopHeaders(resp.Header)
	for k, vv := range resp.Header {
		w.Header()[k] = vv
	}
	if resp.ContentLength <= 0 || len(resp.TransferEncoding) > 0 {
		// Nothing to splice (a 304, an empty body) or no length to splice
		// up to (not what the template center sends for artifact
		// bytes): the headers as they came and an ordinary copy.
		w.WriteHeader(resp.StatusCode)
		if _, err := io.Copy(w, resp.Body); err != nil {
			p.abort(r, err)
		}
		return
	}
	w.Header().Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	w.WriteHeader(resp.StatusCode)
	// What the header read buffered first, then the rest straight from
	// the socket: io.Copy to net/http's writer splices a *net.TCPConn.
	n, err := io.CopyN(w, br, min(int64(br.Buffered()), resp.ContentLength))
	if err == nil && n < resp.ContentLength {
		var m int64
		m, err = io.Copy(w, io.LimitReader(conn, resp.ContentLength-n))
		n += m
	}
	if err == nil && n < resp.ContentLength {
		err = fmt.Errorf("the template center sent %d of %d bytes: %w", n, resp.ContentLength, io.ErrUnexpectedEOF)
	}
	if err != nil {
		p.abort(r, err)
	}
}

// fail answers a download the template center did not answer; a client
// that went away meanwhile (which closes the connection) is no failure of
// the template center's.
func (p *spliceProxy) fail(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() == nil {
		p.log.WarnContext(r.Context(), "download proxy to template center failed", "err", err)
	}
	http.Error(w, "template center unavailable", http.StatusBadGateway)
}

// dropHopHeaders removes the headers meant for one connection only: the
// fixed list and those its Connection header names.
func dropHopHeaders(h http.Header) {
	for _, v := range h["Connection"] {
		for _, name := range strings.Split(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// abort ends a response whose body could not be sent in full: the client
// must see a broken download, never a short one that looks complete.
func (p *spliceProxy) abort(r *http.Request, err error) {
	if !errors.Is(err, context.Canceled) && r.Context().Err() == nil {
		p.log.WarnContext(r.Context(), "download proxy to template center broke off", "err", err)
	}
	panic(http.ErrAbortHandler)
}

// hostPort is u's host with the scheme's default port when it names none.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), "80")
}
