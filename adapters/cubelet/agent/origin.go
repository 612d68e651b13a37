package agent

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path"
	"strings"
)

// parseBases checks the master base URLs downloads may come from: absolute
// http(s) URLs with a host, no credentials, query or fragment. Their paths
// are prefixes ending in '/'.
func parseBases(raw []string) ([]*url.URL, error) {
	var out []*url.URL
	for i, r := range raw {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		// Messages quote no more than scheme, host and path: a mistyped
		// URL may carry a password.
		u, err := url.Parse(r)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
			return nil, fmt.Errorf("node agent: master URL %d of %d is not an absolute http(s) URL", i+1, len(raw))
		}
		shown := u.Scheme + "://" + u.Host + u.EscapedPath()
		if u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
			return nil, fmt.Errorf("node agent: master URL %s must be a base URL: no user, query or fragment", shown)
		}
		b := &url.URL{Scheme: u.Scheme, Host: canonicalHost(u), Path: strings.TrimSuffix(u.Path, "/") + "/"}
		if path.Clean(b.Path) != strings.TrimSuffix(b.Path, "/") && b.Path != "/" {
			return nil, fmt.Errorf("node agent: master URL %s has dot segments in its path", shown)
		}
		out = append(out, b)
	}
	if len(out) == 0 {
		return nil, errors.New("node agent: at least one master base URL is required: artifacts are downloaded from the master only")
	}
	return out, nil
}

// canonicalHost is u's host in lower case with the scheme's default port
// made explicit, so http://Master and http://master:80 compare equal.
func canonicalHost(u *url.URL) string {
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(host, port)
}

// fromMaster reports whether u is under one of the base URLs: same scheme,
// host and port, and a path inside the base's path with no dot segment
// (u.Path is decoded: an escaped one counts) that could climb out of it.
func (a *Agent) fromMaster(u *url.URL) bool {
	if u.User != nil || u.Opaque != "" {
		return false
	}
	p := u.Path
	if p == "" {
		p = "/"
	}
	if path.Clean(p) != strings.TrimSuffix(p, "/") && p != "/" {
		return false
	}
	host := canonicalHost(u)
	for _, b := range a.bases {
		if u.Scheme == b.Scheme && host == b.Host && strings.HasPrefix(p+"/", b.Path) {
			return true
		}
	}
	return false
}
