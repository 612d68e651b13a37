package core

import (
	"net/netip"
)

// EmbeddedIPv4 is an IPv4 address carried inside an IPv6 one: a packet to
// the IPv6 address is delivered, by a translator or a tunnel, to the IPv4
// one. An egress policy must judge it by the IPv4 address, or 64:ff9b::7f00:1
// reaches 127.0.0.1 on a host with NAT64 and DNS64.
type EmbeddedIPv4 struct {
	Addr netip.Addr
	// Form names the embedding ("NAT64", "6to4", "Teredo client", ...).
	Form string
}

var (
	nat64WellKnown = netip.MustParsePrefix("64:ff9b::/96")    // RFC 6052
	nat64Local     = netip.MustParsePrefix("64:ff9b:1::/48")  // RFC 8215
	sixToFour      = netip.MustParsePrefix("2002::/16")       // RFC 3056
	teredo         = netip.MustParsePrefix("2001::/32")       // RFC 4380
	v4Compatible   = netip.MustParsePrefix("::/96")           // RFC 4291 (deprecated)
	v4Translated   = netip.MustParsePrefix("::ffff:0:0:0/96") // RFC 2765 (SIIT)
)

// EmbeddedIPv4s returns the IPv4 addresses a carries, in every form that
// embeds one: IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d;
// not :: and ::1, which are IPv6's own unspecified and loopback
// addresses), IPv4-translated (::ffff:0:a.b.c.d), NAT64 (64:ff9b::/96,
// and 64:ff9b:1::/48, see localNAT64), 6to4 (2002:AABB:CCDD::) and Teredo
// (2001:0:SSSS:SSSS::, whose server is bits 32-63 and whose client is the
// bitwise inverse of the last 32 bits). A plain IPv4 address or an IPv6
// address of no such form has none.
func EmbeddedIPv4s(a netip.Addr) []EmbeddedIPv4 {
	if !a.Is6() {
		return nil
	}
	if a.Is4In6() {
		return []EmbeddedIPv4{{a.Unmap(), "IPv4-mapped"}}
	}
	b := a.As16()
	at := func(i int) netip.Addr { return netip.AddrFrom4([4]byte(b[i : i+4])) }
	switch {
	case nat64WellKnown.Contains(a):
		return []EmbeddedIPv4{{at(12), "NAT64"}}
	case nat64Local.Contains(a):
		return localNAT64(b)
	case sixToFour.Contains(a):
		return []EmbeddedIPv4{{at(2), "6to4"}}
	case teredo.Contains(a):
		c := [4]byte(b[12:16])
		for i := range c {
			c[i] ^= 0xff
		}
		return []EmbeddedIPv4{{at(4), "Teredo server"}, {netip.AddrFrom4(c), "Teredo client"}}
	case v4Translated.Contains(a):
		return []EmbeddedIPv4{{at(12), "IPv4-translated"}}
	case v4Compatible.Contains(a) && a != netip.IPv6Unspecified() && a != netip.IPv6Loopback():
		return []EmbeddedIPv4{{at(12), "IPv4-compatible"}}
	}
	return nil
}

// localNAT64 reads an address of the local-use NAT64 prefix 64:ff9b:1::/48
// (RFC 8215), whose translator may use any prefix length RFC 6052 allows
// inside it (/48, /56, /64, /96): the IPv4 address is read in every layout
// the address fits (bits 64-71 and the bits after the IPv4 address zero,
// RFC 6052 §2.2), so whichever the translator uses is judged. A reading in
// 0.0.0.0/8 is no translation a translator makes (RFC 6052 §3.1) but the
// zero bits of another layout, and is left out unless no other remains.
// The prefix is for translating to non-global addresses, so an egress
// policy should also count it as private.
func localNAT64(b [16]byte) []EmbeddedIPv4 {
	zero := func(bs ...byte) bool {
		for _, x := range bs {
			if x != 0 {
				return false
			}
		}
		return true
	}
	var all, kept []EmbeddedIPv4
	add := func(fits bool, v4 [4]byte, form string) {
		if !fits {
			return
		}
		e := EmbeddedIPv4{netip.AddrFrom4(v4), form}
		all = append(all, e)
		if v4[0] != 0 {
			kept = append(kept, e)
		}
	}
	add(zero(b[8]) && zero(b[11:]...), [4]byte{b[6], b[7], b[9], b[10]}, "local-use NAT64 /48")
	add(zero(b[8]) && zero(b[12:]...), [4]byte{b[7], b[9], b[10], b[11]}, "local-use NAT64 /56")
	add(zero(b[8]) && zero(b[13:]...), [4]byte(b[9:13]), "local-use NAT64 /64")
	add(true, [4]byte(b[12:16]), "local-use NAT64 /96")
	if len(kept) == 0 {
		return all
	}
	return kept
}

// IsLocalNAT64 reports whether a is in the local-use NAT64 prefix
// 64:ff9b:1::/48 (RFC 8215), meant for translating to non-global IPv4
// addresses.
func IsLocalNAT64(a netip.Addr) bool { return nat64Local.Contains(a) }
