package core_test

import (
	"testing"

	"github.com/cubesandbox/templatecenter/core"
)

func TestNodeScope(t *testing.T) {
	const id, ip = "node-a", "10.0.0.1"
	for _, tc := range []struct {
		name   string
		scope  core.NodeScope
		id, ip string
		want   bool
	}{
		{"empty names every node", nil, id, ip, true},
		{"by id", core.NodeScope{"node-b", id}, id, ip, true},
		{"by IP", core.NodeScope{ip}, id, ip, true},
		{"another node", core.NodeScope{"node-b", "10.0.0.2"}, id, ip, false},
		{"a node without an IP is named by id only", core.NodeScope{""}, id, "", false},
		{"an IP never names a node by its id", core.NodeScope{ip}, "node-c", "10.0.0.3", false},
	} {
		if got := tc.scope.Includes(tc.id, tc.ip); got != tc.want {
			t.Errorf("%s: %q.Includes(%q, %q) = %v, want %v", tc.name, tc.scope, tc.id, tc.ip, got, tc.want)
		}
	}
}

func TestReplicaOnNode(t *testing.T) {
	for _, tc := range []struct {
		name     string
		row      core.Replica
		id, ip   string
		expected bool
	}{
		{"same id", core.Replica{NodeID: "node-a", NodeIP: "10.0.0.9"}, "node-a", "10.0.0.1", true},
		{"another id with the same IP", core.Replica{NodeID: "node-b", NodeIP: "10.0.0.1"}, "node-a", "10.0.0.1", false},
		{"no id: by IP", core.Replica{NodeIP: "10.0.0.1"}, "node-a", "10.0.0.1", true},
		{"no id, another IP", core.Replica{NodeIP: "10.0.0.2"}, "node-a", "10.0.0.1", false},
		{"neither id nor IP", core.Replica{}, "node-a", "", false},
	} {
		if got := tc.row.OnNode(tc.id, tc.ip); got != tc.expected {
			t.Errorf("%s: OnNode(%q, %q) = %v, want %v", tc.name, tc.id, tc.ip, got, tc.expected)
		}
	}
}
