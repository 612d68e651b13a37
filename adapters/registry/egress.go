package registry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"github.com/cubesandbox/templatecenter/core"
)

// ErrEgressDenied is wrapped by errors for connections the egress policy
// refuses.
var ErrEgressDenied = errors.New("egress policy refused the address")

// EgressPolicy decides which addresses registry connections may reach. It
// exists because an image reference is user input: without it a reference
// such as 169.254.169.254/latest/meta-data:x would make the service fetch
// from the cloud metadata endpoint (SSRF).
//
// Always refused, whatever the settings: link-local addresses
// (169.254.0.0/16 including the AWS/GCP/Azure/Tencent metadata address
// 169.254.169.254, fe80::/10), the other well-known metadata addresses
// (fd00:ec2::254, 100.100.100.200) and names (metadata.google.internal,
// metadata), unspecified (0.0.0.0/8, ::), multicast and broadcast
// addresses.
//
// Loopback (127.0.0.0/8, ::1) and private ranges (10/8, 172.16/12,
// 192.168/16, 100.64/10, fc00::/7) are refused unless AllowLoopback /
// AllowPrivate is set or the host being dialled is trusted: listed in
// TrustedHosts, in Options.InsecureHosts, or as a mirror. Everything else
// (public addresses) is allowed. An IPv6 address that embeds an IPv4
// address (NAT64 64:ff9b::/96 and 64:ff9b:1::/48, 6to4 2002::/16, Teredo
// 2001::/32, IPv4-compatible ::a.b.c.d, IPv4-mapped ::ffff:a.b.c.d) is
// judged by the embedded address too, since a translator or tunnel
// delivers it there.
//
// The policy is enforced where connections are made, on the resolved
// address actually dialled, so DNS rebinding and redirects (to a token
// realm, a CDN, or a metadata address) are covered too.
type EgressPolicy struct {
	AllowLoopback bool
	AllowPrivate  bool
	// TrustedHosts are "host" or "host:port" entries that may resolve to
	// loopback or private addresses.
	TrustedHosts []string
}

// Resolver looks up host names; *net.Resolver satisfies it. Tests inject a
// fake to make a name resolve to a forbidden address.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

var privateRanges = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("fc00::/7"),
}

// egress applies an EgressPolicy when dialling.
type egress struct {
	policy   EgressPolicy
	trusted  map[string]bool
	resolver Resolver
	dialer   net.Dialer
	idle     time.Duration
}

func newEgress(p EgressPolicy, extraTrusted []string, r Resolver, idle time.Duration) *egress {
	e := &egress{policy: p, trusted: map[string]bool{}, resolver: r, idle: idle}
	for _, h := range append(append([]string{}, p.TrustedHosts...), extraTrusted...) {
		if h = strings.ToLower(strings.TrimSpace(h)); h != "" {
			e.trusted[h] = true
		}
	}
	if e.resolver == nil {
		e.resolver = net.DefaultResolver
	}
	e.dialer = net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	return e
}

func (e *egress) isTrusted(host, port string) bool {
	host = strings.ToLower(strings.Trim(host, "[]"))
	return e.trusted[host] || e.trusted[net.JoinHostPort(host, port)] || e.trusted[host+":"+port]
}

// checkName refuses host names that point at metadata services whatever
// they resolve to.
func checkName(host string) error {
	if core.IsMetadataHostName(host) {
		return fmt.Errorf("%s is a cloud metadata service: %w", host, ErrEgressDenied)
	}
	return nil
}

// checkAddr applies the policy to one resolved address of host:port. The
// addresses refused whatever the settings are core's
// (core.NeverAllowedRegistryAddr), which the control plane also applies
// to literal addresses in references before it writes a job.
//
// An IPv6 address that embeds an IPv4 one (NAT64, 6to4, Teredo,
// IPv4-compatible and -mapped: core.EmbeddedIPv4s) is judged by every
// address it carries as well as by itself: behind a translator,
// 64:ff9b::7f00:1 is 127.0.0.1.
func (e *egress) checkAddr(host, port string, a netip.Addr) error {
	a = a.Unmap()
	if reason := core.NeverAllowedRegistryAddr(a); reason != "" {
		return fmt.Errorf("%s resolves to %s, %s: %w", host, a, reason, ErrEgressDenied)
	}
	if err := e.checkClass(host, port, a, a.String()); err != nil {
		return err
	}
	for _, em := range core.EmbeddedIPv4s(a) {
		if err := e.checkClass(host, port, em.Addr, fmt.Sprintf("%s, which embeds %s (%s),", a, em.Addr, em.Form)); err != nil {
			return err
		}
	}
	return nil
}

// checkClass refuses a loopback or private address unless the policy or
// the host's trust allows it; shown is how the message names it.
func (e *egress) checkClass(host, port string, a netip.Addr, shown string) error {
	switch {
	case a.IsLoopback():
		if e.policy.AllowLoopback || e.isTrusted(host, port) {
			return nil
		}
		return fmt.Errorf("%s resolves to loopback %s and is not a trusted registry host: %w", host, shown, ErrEgressDenied)
	case isPrivate(a):
		if e.policy.AllowPrivate || e.isTrusted(host, port) {
			return nil
		}
		return fmt.Errorf("%s resolves to private %s and is not a trusted registry host: %w", host, shown, ErrEgressDenied)
	}
	return nil
}

// isPrivate counts the local-use NAT64 prefix as private: it exists to
// translate to non-global IPv4 addresses (RFC 8215).
func isPrivate(a netip.Addr) bool {
	if core.IsLocalNAT64(a) {
		return true
	}
	for _, p := range privateRanges {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// resolve returns the addresses of host that the policy allows, or the
// first refusal when none is allowed.
func (e *egress) resolve(ctx context.Context, host, port string) ([]netip.Addr, error) {
	if err := checkName(host); err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		addrs = []netip.Addr{a}
	} else {
		addrs, err = e.resolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, fmt.Errorf("resolving %s: %w", host, err)
		}
	}
	var allowed []netip.Addr
	var firstErr error
	for _, a := range addrs {
		if err := e.checkAddr(host, port, a); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		allowed = append(allowed, a)
	}
	if len(allowed) == 0 {
		if firstErr == nil {
			firstErr = fmt.Errorf("%s has no addresses", host)
		}
		return nil, firstErr
	}
	return allowed, nil
}

// DialContext resolves addr once, checks every address against the policy
// and dials only allowed ones (by IP, so a second lookup cannot return
// something else). The dialer's Control hook re-checks the socket address
// as a last line of defence.
func (e *egress) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	addrs, err := e.resolve(ctx, host, port)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	d := e.dialer
	d.Control = func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("unexpected socket address %q: %w", address, ErrEgressDenied)
		}
		return e.checkAddr(host, port, ap.Addr())
	}
	var lastErr error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			if e.idle > 0 {
				return &idleConn{Conn: c, idle: e.idle}, nil
			}
			return c, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// idleConn fails a read or write that makes no progress for idle, so a
// registry trickling one byte a minute cannot hold a worker forever.
type idleConn struct {
	net.Conn
	idle time.Duration
}

func (c *idleConn) Read(p []byte) (int, error) {
	_ = c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	return c.Conn.Read(p)
}

func (c *idleConn) Write(p []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.idle))
	return c.Conn.Write(p)
}
