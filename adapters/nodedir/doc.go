// Package nodedir is a ports.NodeDirectory over a static list of nodes from
// configuration (CUBE_MASTER_NODES), each probed with the standard gRPC
// health service (grpc.health.v1.Health/Check) on its node agent address.
//
// A Directory made by New keeps its list; one made by NewWithSource asks its
// Source again before every probe round. StoreSource merges the configured
// list with the node table (t_cube_template_node, ports.NodeRepository): a
// row adds a node or overrides its address, a disabled row takes it out
// (see Merge).
//
// A node is healthy after a probe answered SERVING (or Unimplemented: the
// agent answers gRPC but serves no health service, as an upstream Cubelet
// may), and unhealthy after any other answer, a timeout or a connection failure.
// Before the first probe every node counts as unhealthy; Start probes once
// synchronously, so a directory that has been started always reflects a real
// answer.
//
// HealthyNodes is what template distribution uses, so unhealthy nodes get
// no new templates. Unhealthy nodes are probed again every RetryInterval
// (1 s) and, on the spot, when HealthyNodes is asked for their instance
// type, so a node agent started after the master is used at once; healthy
// nodes every Interval (10 s). Get returns a node whatever its health: the delete and
// GC paths must still reach a node to clean up copies it holds, and a call
// to a node that is down fails on its own with a clear error.
package nodedir
