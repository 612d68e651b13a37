package registry

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/regclient/regclient/types/ref"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// refSeeds are references of every shape the catalogue of bad inputs
// names, plus good ones.
var refSeeds = []string{
	"alpine", "alpine:3.20", "docker.io/library/alpine:3.20", "registry.example.com/team/app:v1",
	"registry.example.com:5000/team/app@sha256:" + strings.Repeat("a", 64),
	"ghcr.io/a/b:c@sha512:" + strings.Repeat("b", 128), "localhost:5000/x:1", "localhost/x", "[::1]:5000/x:y",
	"127.0.0.1:5000/a/b", "10.0.0.1/x", "MyHost/x", "a.b./c", "a__b/c--d/e.f", "x:99999/y",
	"/etc/passwd", "file:///etc/passwd", "ocidir:///etc/secret-layout:latest", "ocifile:///tmp/x.tar", "http://evil.example/x",
	"169.254.169.254/latest/meta-data:x", "169.254.169.254:80/latest/meta-data", "[fd00:ec2::254]:80/x", "[fe80::1]/x",
	"[::ffff:169.254.169.254]/x", "[64:ff9b::a9fe:a9fe]/x", "[64:ff9b:1::a9fe:a9fe]/x", "[2002:a9fe:a9fe::]/x",
	"[2001:0:4136:e378:8000:63bf:5601:5601]/x", "[::a9fe:a9fe]/x", "[64:ff9b::7f00:1]:5000/x", "[2002:a00:1::]/x",
	"100.100.100.200/x", "0.0.0.0:5000/x", "224.0.0.1/x", "metadata.google.internal/x:y",
	"metadata:80/x", "metadata/x", "ALPINE", "alpine@sha256:abc", "alpine@md5:" + strings.Repeat("0", 32),
	"alpine@sha256:" + strings.Repeat("A", 64), "alpine:latest\n", "alp\x00ine", "alp ine", "regіstry.example/x",
	"user:pass@registry.example/x", "a/b:" + strings.Repeat("t", 129), "a/b:" + strings.Repeat("t", 128),
	strings.Repeat("a", 256), strings.Repeat("a", 251), "localhost", "localhost:5000", "a//b", "a/", ":tag", "@sha256:x",
	"a@b@c", "[::1/x", "[zz]/x", "host:/x", "-a/b", "a/b:.x", "a/b:-x", "a/b:_x",
	"ocidir://", "ocidir:///var/layouts/app", "ocidir:///var/layouts/app:v1@sha256:" + strings.Repeat("c", 64),
	"ocidir://rel/dir+x~y_z.-", "ocidir:///a:b:c", "ocidir:///a@sha256:abc", "ocidir:///a:", "ocidir://:v1", "ocidir:///a#b",
	"OCIDIR:///a", "ocidir://x://y", "index.docker.io/a", "registry-1.docker.io/a/b", "docker.io/a", "a:b@sha256:" + strings.Repeat("d", 64),
}

// TestRefParityWithTheDataPlane holds the control plane's reference check
// (core.ValidateImageRef, applied before a job is written) to the data
// plane's parser (parseRef, core's grammar plus the policy): the master
// never refuses a reference the data plane could pull, and every reference
// the master lets through parses on the data plane. The only differences
// are the addresses refused outright, which the data plane refuses when it
// dials, and ocidir://, which is the data plane's opt-in.
//
// Both read core's grammar; regclient's own parser (libraryRef) is the
// oracle it is held to: they accept and refuse the same references, and
// what core parses is, field for field, what regclient would fetch.
func TestRefParityWithTheDataPlane(t *testing.T) {
	s := &Source{opts: Options{}}
	for _, ref := range refSeeds {
		checkParity(t, s, ref)
	}
}

func FuzzRefParity(f *testing.F) {
	for _, ref := range refSeeds {
		f.Add(ref)
	}
	s := &Source{opts: Options{}}
	f.Fuzz(func(t *testing.T, ref string) { checkParity(t, s, ref) })
}

func checkParity(t *testing.T, s *Source, ref string) {
	t.Helper()
	checkGrammar(t, ref)
	coreErr := core.ValidateImageRef(ref)
	_, regErr := s.parseRef(ref)
	switch {
	case coreErr != nil && regErr == nil:
		// Allowed only for registry hosts the data plane could never
		// reach whatever its policy: literal addresses and metadata names
		// it refuses when it dials, and IPv6-looking literals that are no
		// address at all.
		r, _ := s.parseRef(ref)
		host, port, err := net.SplitHostPort(r.Registry)
		if err != nil {
			host, port = r.Registry, "443"
		}
		bare := strings.Trim(host, "[]")
		if _, perr := netip.ParseAddr(bare); perr != nil && !strings.HasPrefix(r.Registry, "[") && !core.IsMetadataHostName(bare) {
			t.Errorf("%q: the master refuses (%v) what the data plane parses", ref, coreErr)
			return
		}
		open := newEgress(EgressPolicy{AllowLoopback: true, AllowPrivate: true, TrustedHosts: []string{r.Registry}}, nil, fakeResolver{}, 0)
		if _, err := open.resolve(t.Context(), host, port); err == nil {
			t.Errorf("%q: refused by the master, reachable under the most permissive egress policy", ref)
		}
	case coreErr == nil && regErr != nil && !strings.HasPrefix(ref, core.LocalLayoutScheme+"://"):
		t.Errorf("%q: the master lets through what the data plane refuses (%v)", ref, regErr)
	}
	for _, err := range []error{coreErr, regErr} {
		if err != nil && len(ref) >= 8 && strings.Contains(err.Error(), ref) {
			t.Errorf("a refusal echoes the reference: %v", err)
		}
	}
}

// checkGrammar holds core's grammar to regclient's parser: both accept or
// both refuse, and an accepted reference converts to the one regclient
// makes of it.
func checkGrammar(t *testing.T, raw string) {
	t.Helper()
	got, coreErr := core.ParseImageRef(raw)
	want, libErr := libraryRef(raw)
	switch {
	case coreErr != nil && libErr == nil:
		t.Errorf("%q: core refuses (%v) what regclient parses as %+v", raw, coreErr, want)
	case coreErr == nil && libErr != nil:
		t.Errorf("%q: core parses as %+v what regclient refuses (%v)", raw, got, libErr)
	case coreErr == nil:
		want.Reference = want.CommonName()
		if r := regRef(got); r != want {
			t.Errorf("%q: core parses it as %+v, regclient as %+v", raw, r, want)
		}
	}
}

// libraryRef is regclient's parse of a reference under the rules the data
// plane put around it before core's grammar replaced it: whitespace,
// control and non-ASCII characters, schemes other than ocidir://,
// repositories over 255 characters and digests other than sha256 and
// sha512 refused. It is the oracle core.ParseImageRef is held to.
func libraryRef(raw string) (ref.Ref, error) {
	if strings.TrimSpace(raw) == "" || len(raw) > core.MaxImageRefLen {
		return ref.Ref{}, errors.New("empty or too long")
	}
	for _, c := range raw {
		if c <= ' ' || c >= 0x7f {
			return ref.Ref{}, errors.New("whitespace, control or non-ASCII characters")
		}
	}
	if scheme, _, ok := strings.Cut(raw, "://"); ok && scheme != core.LocalLayoutScheme {
		return ref.Ref{}, errors.New("scheme")
	}
	r, err := ref.New(raw)
	if err != nil {
		return ref.Ref{}, err
	}
	switch {
	case r.Scheme == "reg" && len(r.Repository) > core.MaxRepositoryLen:
		return ref.Ref{}, errors.New("repository too long")
	case r.Scheme != "reg" && r.Scheme != core.LocalLayoutScheme:
		return ref.Ref{}, errors.New("scheme")
	}
	if r.Digest != "" {
		if _, err := checkDigest(r.Digest); err != nil {
			return ref.Ref{}, err
		}
	}
	return r, nil
}

// TestNamesResolvingToRefusedAddresses: a reference whose registry is a
// name that resolves to loopback, private, link-local or metadata
// addresses (localtest.me, nip.io and sslip.io names, a rebinding name)
// passes the control plane's syntax check, so the data plane refuses it
// where it dials: no connection is made, and the error is a field error
// on source_image_ref wrapping ErrEgressDenied. The names resolve through
// a test resolver: nothing leaves the machine.
func TestNamesResolvingToRefusedAddresses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	addr := netip.MustParseAddr
	s := newTestSource(t, nil, func(o *Options) {
		o.Retries = -1
		o.Resolver = fakeResolver{
			"app.localtest.me":             {addr("127.0.0.1")},
			"v6.localtest.me":              {addr("::1")},
			"169.254.169.254.nip.io":       {addr("169.254.169.254")},
			"10.0.0.7.sslip.io":            {addr("10.0.0.7")},
			"192-168-1-1.nip.io":           {addr("192.168.1.1")},
			"mapped.example":               {addr("::ffff:169.254.169.254")},
			"ec2v6.example":                {addr("fd00:ec2::254")},
			"linklocal.example":            {addr("fe80::1")},
			"cgnat.example":                {addr("100.64.0.1")},
			"ula.example":                  {addr("fd12:3456::1")},
			"rebind.example":               {addr("127.0.0.1"), addr("169.254.169.254")},
			"unspecified.example":          {addr("0.0.0.0")},
			"broadcast.example":            {addr("255.255.255.255")},
			"alibaba-metadata.example":     {addr("100.100.100.200")},
			"private-and-loopback.example": {addr("10.1.1.1"), addr("127.0.0.2")},
			"loopback-other-octet.example": {addr("127.1.2.3")},
			// IPv6 answers embedding refused IPv4 addresses (DNS64 makes
			// these for any name on an IPv6-only host).
			"nat64-metadata.example":  {addr("64:ff9b::a9fe:a9fe")},
			"nat64-loopback.example":  {addr("64:ff9b::7f00:1")},
			"nat64-private.example":   {addr("64:ff9b::a00:1")},
			"local-nat64.example":     {addr("64:ff9b:1::808:808")},
			"6to4-loopback.example":   {addr("2002:7f00:1::")},
			"6to4-metadata.example":   {addr("2002:a9fe:a9fe::")},
			"teredo-loopback.example": {addr("2001:0:4136:e378:8000:63bf:80ff:fffe")},
			"compat-loopback.example": {addr("::7f00:1")},
			"compat-private.example":  {addr("::c0a8:101")},
		}
	})
	for host := range s.egress.resolver.(fakeResolver) {
		t.Run(host, func(t *testing.T) {
			ref := strings.TrimSuffix(host, ".") + ":" + port + "/team/app:1"
			if err := core.ValidateImageRef(ref); err != nil {
				t.Fatalf("the control plane refuses %q by syntax (%v); this test is about names", ref, err)
			}
			_, err := s.Resolve(t.Context(), ports.ImageRequest{Ref: ref})
			var fe *core.FieldError
			if !errors.Is(err, ErrEgressDenied) || !errors.As(err, &fe) || fe.Field != "source_image_ref" {
				t.Fatalf("err = %v, want a source_image_ref field error wrapping ErrEgressDenied", err)
			}
		})
	}
	select {
	case <-accepted:
		t.Fatal("a refused name was connected to")
	default:
	}
}
