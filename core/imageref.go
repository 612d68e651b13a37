package core

import (
	"net/netip"
	"regexp"
	"slices"
	"strings"
)

// MaxImageRefLen is the width of the source_image_ref columns.
const MaxImageRefLen = 1024

// MaxRepositoryLen is the distribution spec's limit on a repository name.
const MaxRepositoryLen = 255

// LocalLayoutScheme is the one scheme a reference may carry: an OCI layout
// on the data plane's disk, refused there unless its operator allowed
// local layouts (CUBE_TEMPLATE_CENTER_ALLOW_LOCAL_LAYOUTS). The control
// plane cannot know that setting, so it leaves the decision to the data
// plane.
const LocalLayoutScheme = "ocidir"

var (
	refTagPattern    = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)
	refPathPattern   = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$`)
	refHostPattern   = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?$`)
	refPortPattern   = regexp.MustCompile(`^[0-9]+$`)
	refSchemePattern = regexp.MustCompile(`^[a-z][a-z0-9+.-]{0,15}$`)
	refDigestHex     = regexp.MustCompile(`^[a-f0-9]+$`)
	// refLayoutPathPattern is the path of an ocidir:// reference.
	refLayoutPathPattern = regexp.MustCompile(`^[/A-Za-z0-9_.~+-]+$`)
	// refIPv6Shape is an IPv6 literal as the reference grammar has it:
	// hex groups, at most one "::" with groups on at least one side.
	refIPv6Shape = regexp.MustCompile(`^(?:` + ipv6Groups + `|::` + ipv6Groups + `|` + ipv6Groups + `::` + ipv6Groups + `|` + ipv6Groups + `::)$`)
)

const ipv6Groups = `(?:[0-9a-fA-F]{1,4}:){0,7}[0-9a-fA-F]{1,4}`

// Docker Hub's names: a repository on them without a namespace is under
// library/.
var dockerHubNames = []string{"", DockerHub, "index.docker.io", "registry-1.docker.io"}

// DockerHub is Docker Hub's registry name in a parsed reference.
const DockerHub = "docker.io"

// ImageRef is a source image reference in the one grammar this service
// reads, parsed into the parts the registry source fetches by: Docker
// Hub's names made docker.io (and library/ added to a repository without
// a namespace), and the tag latest when neither a tag nor a digest is
// given.
type ImageRef struct {
	// Registry is host[:port] and Repository the path on it; both are
	// empty for a local layout.
	Registry   string
	Repository string
	Tag        string
	// Digest is a sha256 or sha512 digest, or "".
	Digest string
	// LayoutPath is the directory of a local OCI layout (ocidir://, see
	// LocalLayoutScheme), "" for a registry reference.
	LayoutPath string
}

// IsLocalLayout reports whether r names a local OCI layout.
func (r ImageRef) IsLocalLayout() bool { return r.LayoutPath != "" }

// ParseImageRef parses a source image reference in the grammar of
// ValidateImageRef without judging the registry's address: the control
// plane does that (ValidateImageRef) before anything is written, the
// registry source's egress policy where it dials. Refusals are
// *FieldError on source_image_ref that never repeat the reference.
func ParseImageRef(ref string) (ImageRef, error) { return parseImageRef(ref, false) }

// ValidateImageRef checks a source image reference before anything is
// written for it: [registry[:port]/]repository[:tag][@digest] in the
// distribution grammar, ASCII without whitespace or control characters,
// no URL scheme (ocidir://path[:tag][@digest] excepted, see
// LocalLayoutScheme), no user info, a sha256 or sha512 digest, a tag of
// at most 128 characters, a repository of at most 255, and a registry
// host that is not a literal link-local, cloud metadata, unspecified,
// multicast or broadcast address or a metadata host name (the data
// plane's egress policy refuses those whatever its settings, and checks
// every address it dials, names included, so loopback and private
// registries are its decision).
//
// Refusals are *FieldError on source_image_ref; their text never repeats
// the reference (it may carry credentials).
func ValidateImageRef(ref string) error {
	_, err := parseImageRef(ref, true)
	return err
}

func parseImageRef(ref string, judgeAddr bool) (ImageRef, error) {
	if ref == "" {
		return ImageRef{}, refErr("is required")
	}
	if len(ref) > MaxImageRefLen {
		return ImageRef{}, refErr("longer than %d characters", MaxImageRefLen)
	}
	for i := 0; i < len(ref); i++ {
		switch c := ref[i]; {
		case c <= ' ' || c == 0x7f:
			return ImageRef{}, refErr("contains whitespace or control characters")
		case c > 0x7e:
			return ImageRef{}, refErr("contains non-ASCII characters (registry hosts must be ASCII or punycode)")
		}
	}
	if scheme, rest, ok := strings.Cut(ref, "://"); ok {
		switch {
		case scheme == LocalLayoutScheme:
			return parseLayoutRef(rest)
		case refSchemePattern.MatchString(scheme):
			return ImageRef{}, refErr("scheme %q is not allowed: use a registry reference such as registry.example.com/repo:tag", scheme)
		}
		return ImageRef{}, refErr("a URL is not an image reference: use registry.example.com/repo:tag")
	}

	var r ImageRef
	name := ref
	if at := strings.IndexByte(ref, '@'); at >= 0 {
		name, r.Digest = ref[:at], ref[at+1:]
		if strings.ContainsAny(r.Digest, "/@") {
			return ImageRef{}, refErr("user info (user:password@host) is not allowed: pass registry_username and registry_password")
		}
		if err := checkRefDigest(r.Digest); err != nil {
			return ImageRef{}, err
		}
	}
	if c := strings.LastIndexByte(name, ':'); c > strings.LastIndexByte(name, '/') {
		if r.Tag = name[c+1:]; !refTagPattern.MatchString(r.Tag) {
			return ImageRef{}, errBadTag
		}
		name = name[:c]
	}

	// The first component is the registry when it is shaped like one;
	// otherwise the whole name is a Docker Hub repository.
	r.Repository = name
	if first, rest, ok := strings.Cut(name, "/"); ok && isRegistryPart(first) {
		if host, ok := registryHost(first); ok {
			if judgeAddr {
				if err := checkRegistryAddr(host); err != nil {
					return ImageRef{}, err
				}
			}
			r.Registry, r.Repository = first, rest
		}
	}
	if r.Repository == "" || (r.Registry == "" && r.Repository == "localhost") {
		return ImageRef{}, refErr("names no repository: want [registry/]repository[:tag][@digest]")
	}
	for _, part := range strings.Split(r.Repository, "/") {
		if refPathPattern.MatchString(part) {
			continue
		}
		if refPathPattern.MatchString(strings.ToLower(part)) {
			return ImageRef{}, refErr("repository must be lowercase")
		}
		return ImageRef{}, refErr("not an image reference: want [registry/]repository[:tag][@digest]")
	}
	if isDockerHub(r.Registry) {
		r.Registry = DockerHub
		if !strings.Contains(r.Repository, "/") {
			r.Repository = "library/" + r.Repository
		}
	}
	if len(r.Repository) > MaxRepositoryLen {
		return ImageRef{}, refErr("repository name longer than %d characters", MaxRepositoryLen)
	}
	if r.Tag == "" && r.Digest == "" {
		r.Tag = "latest"
	}
	return r, nil
}

// parseLayoutRef parses what follows ocidir://: path[:tag][@digest], the
// path of letters, digits and '/', '_', '.', '~', '+', '-'.
func parseLayoutRef(rest string) (ImageRef, error) {
	var r ImageRef
	name := rest
	if at := strings.IndexByte(rest, '@'); at >= 0 {
		name, r.Digest = rest[:at], rest[at+1:]
		if err := checkRefDigest(r.Digest); err != nil {
			return ImageRef{}, err
		}
	}
	if c := strings.IndexByte(name, ':'); c >= 0 {
		if r.Tag = name[c+1:]; !refTagPattern.MatchString(r.Tag) {
			return ImageRef{}, errBadTag
		}
		name = name[:c]
	}
	switch r.LayoutPath = name; {
	case name == "":
		return ImageRef{}, refErr("a local layout (ocidir) reference needs the layout's path")
	case !refLayoutPathPattern.MatchString(name):
		return ImageRef{}, refErr("a local layout's path may hold only letters, digits and '/', '_', '.', '~', '+', '-'")
	}
	return r, nil
}

var errBadTag = refErr("tag must be 1 to 128 of A-Z, a-z, 0-9, '_', '.' and '-', not starting with '.' or '-'")

// isRegistryPart says whether the first component of a name is a registry
// (it has a dot or a port, is localhost, is an IPv6 literal, or is two or
// more characters with upper case, which a repository cannot have) rather
// than a Docker Hub namespace.
func isRegistryPart(s string) bool {
	return strings.ContainsAny(s, ".:[") || s == "localhost" || (len(s) > 1 && strings.ToLower(s) != s)
}

func isDockerHub(registry string) bool { return slices.Contains(dockerHubNames, registry) }

func checkRefDigest(dg string) error {
	algo, hex, _ := strings.Cut(dg, ":")
	want := map[string]int{"sha256": 64, "sha512": 128}[algo]
	if want == 0 || len(hex) != want || !refDigestHex.MatchString(hex) {
		return refErr("digest must be sha256:<64 lowercase hex> or sha512:<128 lowercase hex>")
	}
	return nil
}

// registryHost returns the host of host[:port] when it is a registry in
// the reference grammar: a DNS name (labels of letters, digits and '-',
// one trailing dot allowed) or a bracketed IPv6 address, and a numeric
// port.
func registryHost(registry string) (string, bool) {
	host, port := registry, ""
	if strings.HasPrefix(registry, "[") {
		end := strings.IndexByte(registry, ']')
		if end < 0 {
			return "", false
		}
		host, port = registry[1:end], registry[end+1:]
		if !refIPv6Shape.MatchString(host) {
			return "", false
		}
		if port != "" {
			if !strings.HasPrefix(port, ":") || !refPortPattern.MatchString(port[1:]) {
				return "", false
			}
		}
		return host, true
	}
	if h, p, ok := strings.Cut(registry, ":"); ok {
		if !refPortPattern.MatchString(p) {
			return "", false
		}
		host, port = h, p
	}
	for _, l := range strings.Split(strings.TrimSuffix(host, "."), ".") {
		if !refHostPattern.MatchString(l) {
			return "", false
		}
	}
	return host, true
}

// checkRegistryAddr refuses a registry host that is a literal address
// or a name the data plane may never reach.
func checkRegistryAddr(host string) error {
	if a, err := netip.ParseAddr(host); err == nil {
		if reason := NeverAllowedRegistryAddr(a); reason != "" {
			return refErr("registry host is %s, which is never allowed", reason)
		}
		return nil
	}
	if strings.Contains(host, ":") {
		return refErr("registry host is not an IPv6 address")
	}
	if IsMetadataHostName(host) {
		return refErr("registry host is a cloud metadata service, which is never allowed")
	}
	return nil
}

func refErr(format string, args ...any) error { return fieldErr("source_image_ref", format, args...) }

var (
	metadataAddrs = []netip.Addr{
		netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, Tencent Cloud, ...
		netip.MustParseAddr("fd00:ec2::254"),   // AWS over IPv6
		netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
	}
	metadataHostNames = []string{"metadata.google.internal", "metadata"}
	broadcastAddr     = netip.MustParseAddr("255.255.255.255")
)

// NeverAllowedRegistryAddr says why a registry may never be reached at a,
// whatever the egress settings: a cloud metadata address, link-local,
// unspecified ("this network", 0.0.0.0/8, included), multicast or
// broadcast, or an IPv6 address that embeds such an IPv4 address
// (EmbeddedIPv4s). It returns "" for other addresses (loopback and private
// ones are the egress policy's decision).
func NeverAllowedRegistryAddr(a netip.Addr) string {
	a = a.Unmap()
	if reason := neverAllowed(a); reason != "" {
		return reason
	}
	for _, e := range EmbeddedIPv4s(a) {
		if reason := neverAllowed(e.Addr); reason != "" {
			return "an address embedding " + e.Addr.String() + " (" + e.Form + "), " + reason
		}
	}
	return ""
}

var thisNetwork = netip.MustParsePrefix("0.0.0.0/8")

func neverAllowed(a netip.Addr) string {
	switch {
	case !a.IsValid():
		return "an invalid address"
	case containsAddr(metadataAddrs, a):
		return "a cloud metadata address"
	case a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast():
		return "link-local"
	case a.IsUnspecified() || thisNetwork.Contains(a) || a.IsMulticast() || a.IsInterfaceLocalMulticast() || a == broadcastAddr:
		return "an unspecified, multicast or broadcast address"
	}
	return ""
}

// IsMetadataHostName reports whether host names a cloud metadata service
// (whatever it resolves to).
func IsMetadataHostName(host string) bool {
	h := strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	for _, n := range metadataHostNames {
		if h == n {
			return true
		}
	}
	return false
}

func containsAddr(list []netip.Addr, a netip.Addr) bool {
	for _, x := range list {
		if x == a {
			return true
		}
	}
	return false
}
