package bench

import (
	"slices"
	"strings"
	"testing"
)

// TestLinksCommands: the names fit the kernel's 15 bytes, every node gets
// its own namespace, address and shaped link, and teardown removes every
// namespace setup makes.
func TestLinksCommands(t *testing.T) {
	for _, tt := range []struct {
		nodes, mbit int
		wantRate    string
	}{
		{nodes: 1, mbit: 400, wantRate: "400mbit"},
		{nodes: 8, mbit: 1000, wantRate: "1000mbit"},
	} {
		l := &links{nodes: tt.nodes, mbit: tt.mbit}
		setup := l.setupCommands()
		var made, shaped, addrs []string
		for _, c := range setup {
			line := strings.Join(c, " ")
			switch {
			case strings.HasPrefix(line, "ip netns add "):
				made = append(made, c[3])
			case strings.HasPrefix(line, "tc qdisc add "):
				if !slices.Contains(c, tt.wantRate) {
					t.Errorf("%q does not shape to %s", line, tt.wantRate)
				}
				shaped = append(shaped, c[4])
			case slices.Contains(c, "addr") && slices.Contains(c, "-n"):
				addrs = append(addrs, c[5])
			}
			for _, w := range c {
				if (strings.HasPrefix(w, "cb") || strings.HasPrefix(w, "cube")) && len(w) > 15 && !strings.HasPrefix(w, "cube-bench-node") {
					t.Errorf("interface name %q is longer than 15 bytes", w)
				}
			}
		}
		if len(made) != tt.nodes || len(shaped) != tt.nodes || len(addrs) != tt.nodes {
			t.Fatalf("%d nodes: %d namespaces, %d shaped links, %d addresses", tt.nodes, len(made), len(shaped), len(addrs))
		}
		if slices.Contains(addrs, l.hostAddr()+"/24") || len(slices.Compact(slices.Sorted(slices.Values(addrs)))) != tt.nodes {
			t.Errorf("addresses %v: not distinct, or one is the host's", addrs)
		}
		var removed []string
		for _, c := range l.teardownCommands() {
			if c[1] == "netns" {
				removed = append(removed, c[3])
			}
		}
		for _, ns := range made {
			if !slices.Contains(removed, ns) {
				t.Errorf("teardown leaves namespace %s", ns)
			}
		}
		if got := l.wrap(2, []string{"/bin/nodeagent", "--listen", "x"}); strings.Join(got, " ") != "ip netns exec cube-bench-node2 /bin/nodeagent --listen x" {
			t.Errorf("wrap = %q", got)
		}
	}
}
