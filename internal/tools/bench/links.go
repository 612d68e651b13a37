package bench

import (
	"fmt"
	"os/exec"
	"strings"
)

// links puts each node agent of the services part on a link of its own:
// a network namespace per node, joined to the host by a veth pair on one
// bridge, the host side of each pair shaped to a fixed rate by a token
// bucket (tc tbf), so every node downloads at most that fast, as a node
// machine behind its own network port would. The master listens on the
// bridge's address, which every namespace reaches.
//
// Everything else of a node machine is still shared here (the cores, the
// disk): the rate is chosen so that all nodes together stay inside what
// this machine can hash and write, and the result says whether
// distribution is parallel and the source keeps every link busy, which a
// one-machine run without links cannot show (there the nodes' disk writes
// are the bottleneck, see copyBound).
type links struct {
	nodes int
	mbit  int
	run   func(argv ...string) error
}

// The addresses are from a private /24 of the machine's own making, only
// inside its namespaces; setup refuses to start when the host already
// routes it.
const (
	linkNet    = "10.254.87"
	linkBridge = "cubebenchbr0"
)

// hostAddr is the bridge's address: the master listens there.
func (l *links) hostAddr() string { return linkNet + ".1" }

// nodeAddr is node i's address inside its namespace.
func (l *links) nodeAddr(i int) string { return fmt.Sprintf("%s.%d", linkNet, 10+i) }

func (l *links) netns(i int) string    { return fmt.Sprintf("cube-bench-node%d", i) }
func (l *links) hostVeth(i int) string { return fmt.Sprintf("cbh%d", i) }
func (l *links) nodeVeth(i int) string { return fmt.Sprintf("cbn%d", i) }

// wrap returns argv run inside node i's namespace.
func (l *links) wrap(i int, argv []string) []string {
	return append([]string{"ip", "netns", "exec", l.netns(i)}, argv...)
}

// setupCommands are the commands that build the bridge, the namespaces
// and the shaped links, in order.
func (l *links) setupCommands() [][]string {
	cmds := [][]string{
		{"ip", "link", "add", linkBridge, "type", "bridge"},
		{"ip", "addr", "add", l.hostAddr() + "/24", "dev", linkBridge},
		{"ip", "link", "set", linkBridge, "up"},
	}
	// burst: at least one GSO segment (64 KiB) and a few milliseconds of
	// the rate, or tbf drops what the veth hands it whole.
	burst := max(256<<10, l.mbit*1000*1000/8/100)
	for i := range l.nodes {
		ns, h, n := l.netns(i), l.hostVeth(i), l.nodeVeth(i)
		cmds = append(cmds,
			[]string{"ip", "netns", "add", ns},
			[]string{"ip", "link", "add", h, "type", "veth", "peer", "name", n},
			[]string{"ip", "link", "set", n, "netns", ns},
			[]string{"ip", "link", "set", h, "master", linkBridge},
			[]string{"ip", "link", "set", h, "up"},
			[]string{"ip", "-n", ns, "addr", "add", l.nodeAddr(i) + "/24", "dev", n},
			[]string{"ip", "-n", ns, "link", "set", n, "up"},
			[]string{"ip", "-n", ns, "link", "set", "lo", "up"},
			// Host to node: the artifact's direction.
			[]string{"tc", "qdisc", "add", "dev", h, "root", "tbf",
				"rate", fmt.Sprintf("%dmbit", l.mbit), "burst", fmt.Sprint(burst), "latency", "100ms"},
		)
	}
	return cmds
}

// teardownCommands remove what setupCommands made (the host ends of the
// veth pairs go with their namespaces); failures are ignored by the
// caller, so it also clears what an interrupted run left.
func (l *links) teardownCommands() [][]string {
	var cmds [][]string
	for i := range l.nodes {
		cmds = append(cmds, []string{"ip", "netns", "del", l.netns(i)})
	}
	return append(cmds, []string{"ip", "link", "del", linkBridge})
}

// setup clears what an earlier run may have left and builds the links.
func (l *links) setup() error {
	if l.run == nil {
		l.run = runQuiet
	}
	l.teardown()
	if out, err := exec.Command("ip", "route", "get", l.hostAddr()).CombinedOutput(); err == nil && !strings.Contains(string(out), " via ") {
		return fmt.Errorf("node links: the host already routes %s.0/24 (%s); it cannot be used for the benchmark's namespaces", linkNet, strings.TrimSpace(string(out)))
	}
	for _, c := range l.setupCommands() {
		if err := l.run(c...); err != nil {
			l.teardown()
			return fmt.Errorf("node links (needs root, iproute2, veth, bridge and tbf): %w", err)
		}
	}
	return nil
}

func (l *links) teardown() {
	for _, c := range l.teardownCommands() {
		_ = l.run(c...)
	}
}

func runQuiet(argv ...string) error {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
