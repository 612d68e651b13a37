package core

import (
	"slices"
	"strings"
)

// NodeScope names the nodes a template or a redo goes to: node ids or host
// IPs (upstream's distribution_scope). Empty names every node.
type NodeScope []string

// Limits of a scope, the width of the job column it is stored in.
const (
	MaxScopeEntries  = 1024
	MaxScopeEntryLen = 256
)

// NamesNode reports whether one scope entry names the node with this id
// and IP: the entry is its id, or its IP when it has one.
func NamesNode(entry, id, ip string) bool { return entry == id || (ip != "" && entry == ip) }

// Includes reports whether the scope names the node with this id and IP;
// an empty scope names every node.
func (s NodeScope) Includes(id, ip string) bool {
	return len(s) == 0 || slices.ContainsFunc(s, func(e string) bool { return NamesNode(e, id, ip) })
}

// OnNode reports whether the replica row is the node's with this id and
// IP: by node id, or by IP for a row that recorded no id.
func (r *Replica) OnNode(id, ip string) bool {
	if r.NodeID != "" {
		return r.NodeID == id
	}
	return r.NodeIP != "" && r.NodeIP == ip
}

// NormalizeScope trims a distribution scope in place and checks it: at
// most MaxScopeEntries entries, none empty, longer than MaxScopeEntryLen
// or holding whitespace or control characters.
func NormalizeScope(scope NodeScope) error {
	if len(scope) > MaxScopeEntries {
		return fieldErr("distribution_scope", "%d entries, at most %d allowed", len(scope), MaxScopeEntries)
	}
	for i, s := range scope {
		scope[i] = strings.TrimSpace(s)
		switch {
		case scope[i] == "":
			return fieldErr("distribution_scope", "entry %d is empty", i)
		case len(scope[i]) > MaxScopeEntryLen:
			return fieldErr("distribution_scope", "entry %d is longer than %d characters", i, MaxScopeEntryLen)
		case hasControlOrSpace(scope[i]):
			return fieldErr("distribution_scope", "entry %d holds whitespace or control characters", i)
		}
	}
	return nil
}
