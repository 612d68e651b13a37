package core

import (
	"net/netip"
	"strings"
	"testing"
)

// TestEmbeddedIPv4s: every IPv6 form that carries an IPv4 address gives
// it back, with the form named; other addresses carry none.
func TestEmbeddedIPv4s(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want []string // "addr form"
	}{
		{"::ffff:169.254.169.254", []string{"169.254.169.254 IPv4-mapped"}},
		{"::a9fe:a9fe", []string{"169.254.169.254 IPv4-compatible"}},
		{"::7f00:1", []string{"127.0.0.1 IPv4-compatible"}},
		{"::ffff:0:a00:1", []string{"10.0.0.1 IPv4-translated"}},
		{"64:ff9b::7f00:1", []string{"127.0.0.1 NAT64"}},
		{"64:ff9b::a9fe:a9fe", []string{"169.254.169.254 NAT64"}},
		{"64:ff9b:1::808:808", []string{"8.8.8.8 local-use NAT64 /96"}},
		{"64:ff9b:1:a9fe:a9:fe00::", []string{"169.254.169.254 local-use NAT64 /48", "254.169.254.0 local-use NAT64 /56", "169.254.0.0 local-use NAT64 /64"}},
		{"64:ff9b:1::a:a00:100:0", []string{"10.10.0.1 local-use NAT64 /64", "1.0.0.0 local-use NAT64 /96"}},
		{"2002:7f00:1::", []string{"127.0.0.1 6to4"}},
		{"2002:a9fe:a9fe:1::5", []string{"169.254.169.254 6to4"}},
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", []string{"65.54.227.120 Teredo server", "127.0.0.1 Teredo client"}},
		{"2001:0:a9fe:a9fe:8000:63bf:f7f7:f7f7", []string{"169.254.169.254 Teredo server", "8.8.8.8 Teredo client"}},
		{"::", nil},
		{"::1", nil},
		{"2001:4860:4860::8888", nil},
		{"fd00:ec2::254", nil},
		{"127.0.0.1", nil},
	} {
		var got []string
		for _, e := range EmbeddedIPv4s(netip.MustParseAddr(tc.addr)) {
			got = append(got, e.Addr.String()+" "+e.Form)
		}
		if strings.Join(got, "; ") != strings.Join(tc.want, "; ") {
			t.Errorf("%s: got %q, want %q", tc.addr, got, tc.want)
		}
	}
}

// TestNeverAllowedJudgesEmbeddedAddresses: an IPv6 address that embeds a
// metadata, link-local or unspecified IPv4 address is refused like the
// IPv4 address itself; one that embeds a public address is not.
func TestNeverAllowedJudgesEmbeddedAddresses(t *testing.T) {
	for _, tc := range []struct{ addr, reason string }{
		{"64:ff9b::a9fe:a9fe", "embedding 169.254.169.254 (NAT64), a cloud metadata address"},
		{"64:ff9b:1:a9fe:a9:fe00::", "(local-use NAT64 /48), a cloud metadata address"},
		{"64:ff9b:1::a9fe:1", "(local-use NAT64 /96), link-local"},
		{"2002:a9fe:a9fe::", "(6to4), a cloud metadata address"},
		{"2002:6464:64c8::1", "embedding 100.100.100.200 (6to4), a cloud metadata address"},
		{"2001:0:4136:e378:8000:63bf:5601:5601", "embedding 169.254.169.254 (Teredo client)"},
		{"::a9fe:a9fe", "(IPv4-compatible), a cloud metadata address"},
		{"::ffff:0:a9fe:a9fe", "(IPv4-translated), a cloud metadata address"},
		{"64:ff9b::", "embedding 0.0.0.0 (NAT64), an unspecified"},
		{"2002:ef01:203::", "embedding 239.1.2.3 (6to4), an unspecified, multicast or broadcast address"},
		{"0.1.2.3", "unspecified"},
		{"64:ff9b::808:808", ""},
		{"64:ff9b::7f00:1", ""}, // loopback: the egress policy's decision
		{"2002:808:808::", ""},
		{"2001:0:4136:e378:8000:63bf:f7f7:f7f7", ""},
		{"::1", ""},
	} {
		got := NeverAllowedRegistryAddr(netip.MustParseAddr(tc.addr))
		if (tc.reason == "") != (got == "") || !strings.Contains(got, tc.reason) {
			t.Errorf("%s: %q, want %q", tc.addr, got, tc.reason)
		}
	}
}
