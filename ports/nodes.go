package ports

import (
	"context"

	"github.com/cubesandbox/templatecenter/core"
)

// Node is a sandbox host that receives artifacts.
type Node struct {
	ID           string
	IP           string
	InstanceType string
	// Addr is the node agent's gRPC address (host:port).
	Addr    string
	Healthy bool
}

// NodeDirectory lists the nodes templates are distributed to and knows
// their health. An empty instance type means core.DefaultInstanceType.
type NodeDirectory interface {
	// HealthyNodes returns healthy nodes of the instance type.
	HealthyNodes(ctx context.Context, instanceType string) ([]Node, error)
	// Nodes returns every listed node of the instance type, healthy or not
	// (Healthy says which), sorted by id: a node that is down is a target
	// that cannot be reached, not one to leave out silently.
	Nodes(ctx context.Context, instanceType string) ([]Node, error)
	// Get returns a node by id or core.ErrNotFound.
	Get(ctx context.Context, nodeID string) (Node, error)
	// Down returns a channel that is closed once the node fails a health
	// check or leaves the list, and is closed already when the node is
	// unhealthy now or not listed. The control plane cancels its calls to
	// a node when it closes: a hung node must not hold a job for the
	// calls' whole timeout.
	Down(nodeID string) <-chan struct{}
}

// SnapshotResult is what AppSnapshot returns.
type SnapshotResult struct {
	SandboxID    string
	TemplateID   string
	SnapshotPath string
	// Component versions the node reports (AppSnapshotResponse fields
	// 11-13 and 15, upstream's newest Cubelet; its agent_version comes from
	// the envd --version it runs in the guest); empty when it does not.
	GuestImageVersion string
	AgentVersion      string
	KernelVersion     string
	ShimVersion       string
}

// NodeAgent speaks to a node (the Cubelet services).
type NodeAgent interface {
	// CreateImage has the node download the artifact, verify its size and
	// sha256 against art and store it under art.ArtifactID. Storing an
	// artifact the node already holds with the same sha256 succeeds.
	//
	// With no art.DownloadURL (and no token) it is a presence check that
	// never downloads: it succeeds when the node holds the artifact and
	// fails with an error wrapping core.ErrNotFound when it does not
	// (node agents also compare size and sha256; a Cubelet only finds the
	// file). Any other error says nothing about the artifact.
	CreateImage(ctx context.Context, node Node, art core.NodeArtifact) error
	// DestroyImage removes the artifact from the node; an image the node
	// does not have is not an error.
	DestroyImage(ctx context.Context, node Node, image string) error
	// AppSnapshot builds the node's local run template from the sandbox
	// create request; snapshotDir "" lets the node choose. A request the
	// node's wire format cannot carry is a *core.FieldError.
	AppSnapshot(ctx context.Context, node Node, req *core.SandboxRequest, snapshotDir string) (SnapshotResult, error)
	// CleanupTemplate removes the node's template; missing is not an error.
	CleanupTemplate(ctx context.Context, node Node, templateID, snapshotPath string) error
}
