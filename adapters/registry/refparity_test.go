package registry

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
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
	"[::ffff:169.254.169.254]/x", "100.100.100.200/x", "0.0.0.0:5000/x", "224.0.0.1/x", "metadata.google.internal/x:y",
	"metadata:80/x", "metadata/x", "ALPINE", "alpine@sha256:abc", "alpine@md5:" + strings.Repeat("0", 32),
	"alpine@sha256:" + strings.Repeat("A", 64), "alpine:latest\n", "alp\x00ine", "alp ine", "regіstry.example/x",
	"user:pass@registry.example/x", "a/b:" + strings.Repeat("t", 129), "a/b:" + strings.Repeat("t", 128),
	strings.Repeat("a", 256), strings.Repeat("a", 251), "localhost", "localhost:5000", "a//b", "a/", ":tag", "@sha256:x",
	"a@b@c", "[::1/x", "[zz]/x", "host:/x", "-a/b", "a/b:.x", "a/b:-x", "a/b:_x",
}

// TestRefParityWithTheDataPlane holds the control plane's reference check
// (core.ValidateImageRef, applied before a job is written) to the data
// plane's parser (parseRef, regclient's grammar plus the policy): the
// master never refuses a reference the data plane could pull, and every
// reference the master lets through parses on the data plane. The only
// differences are the addresses refused outright, which the data plane
// refuses when it dials, and ocidir://, which is the data plane's opt-in.
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
	if coreErr != nil && len(ref) >= 8 && strings.Contains(coreErr.Error(), ref) {
		t.Errorf("the master's refusal echoes the reference: %v", coreErr)
	}
}
