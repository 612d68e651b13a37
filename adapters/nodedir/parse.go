package nodedir

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// nameRule is what node ids and instance types may contain.
var nameRule = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Parse reads the node list in its environment form:
//
//	node-1=127.0.0.1:7001,node-2=10.0.0.2:7001@cubebox
//
// Each comma-separated entry is id=host:port with an optional @instanceType
// (default core.DefaultInstanceType). The node's IP is the host part of the
// address (a host name stays a name). Blank entries are skipped, so an
// empty spec is an empty list. Ids and addresses must be unique. Errors are
// *core.FieldError naming the entry ("nodes[1]") and the rule.
func Parse(spec string) ([]ports.Node, error) {
	var out []ports.Node
	ids := map[string]int{}
	addrs := map[string]int{}
	for i, entry := range strings.Split(spec, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		bad := func(format string, args ...any) error {
			return &core.FieldError{Field: fmt.Sprintf("nodes[%d]", i),
				Reason: fmt.Sprintf("%q: ", entry) + fmt.Sprintf(format, args...)}
		}
		id, rest, ok := strings.Cut(entry, "=")
		id, rest = strings.TrimSpace(id), strings.TrimSpace(rest)
		if !ok {
			return nil, bad("want id=host:port[@instanceType]")
		}
		if !nameRule.MatchString(id) {
			return nil, bad("node id %q must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit", id)
		}
		addr, itype := rest, core.DefaultInstanceType
		if a, t, ok := strings.Cut(rest, "@"); ok {
			addr, itype = strings.TrimSpace(a), strings.TrimSpace(t)
			if !nameRule.MatchString(itype) {
				return nil, bad("instance type %q must be 1-128 letters, digits, '.', '_' or '-'", itype)
			}
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, bad("address %q is not host:port: %v", addr, err)
		}
		if host == "" {
			return nil, bad("address %q has no host", addr)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, bad("address %q: port must be 1-65535", addr)
		}
		if j, dup := ids[id]; dup {
			return nil, bad("node id %q is already used by nodes[%d]", id, j)
		}
		if j, dup := addrs[addr]; dup {
			return nil, bad("address %s is already used by nodes[%d]", addr, j)
		}
		ids[id], addrs[addr] = i, i
		out = append(out, ports.Node{ID: id, IP: host, InstanceType: itype, Addr: addr})
	}
	return out, nil
}
