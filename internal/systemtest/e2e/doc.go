// Package e2e runs the whole system as real processes on loopback: two
// templatecenter replicas behind a round-robin proxy, one cubemaster, two node
// agents, MariaDB, Redis, MinIO and a registry, and drives it through the
// public API the way users and nodes do.
package e2e
