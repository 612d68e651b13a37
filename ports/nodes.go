package ports

import "context"

// Node is a sandbox host that receives artifacts.
type Node struct {
	ID           string
	IP           string
	InstanceType string
	// Addr is the node agent's gRPC address (host:port).
	Addr    string
	Healthy bool
}

// NodeDirectory lists the nodes templates are distributed to.
type NodeDirectory interface {
	// HealthyNodes returns healthy nodes of the instance type.
	HealthyNodes(ctx context.Context, instanceType string) ([]Node, error)
	// Get returns a node by id or core.ErrNotFound.
	Get(ctx context.Context, nodeID string) (Node, error)
}

// ImageSpec is what CreateImage sends for ext4 distribution.
type ImageSpec struct {
	Image        string
	StorageMedia string
	Annotations  map[string]string
	InstanceType string
}

// SnapshotResult is what AppSnapshot returns.
type SnapshotResult struct {
	SandboxID    string
	TemplateID   string
	SnapshotPath string
	// Component versions the node reports (AppSnapshotResponse fields
	// 11-13); empty when it does not. The node reports no shim version.
	GuestImageVersion string
	AgentVersion      string
	KernelVersion     string
}

// NodeAgent speaks to a node (the Cubelet services).
type NodeAgent interface {
	CreateImage(ctx context.Context, node Node, spec ImageSpec) error
	// DestroyImage removes the artifact from the node; an image the node
	// does not have is not an error.
	DestroyImage(ctx context.Context, node Node, image string) error
	// AppSnapshot builds the node's local run template from the sandbox
	// create request (JSON of the generated request).
	AppSnapshot(ctx context.Context, node Node, createRequestJSON []byte, snapshotDir string) (SnapshotResult, error)
	// CleanupTemplate removes the node's template; missing is not an error.
	CleanupTemplate(ctx context.Context, node Node, templateID, snapshotPath string) error
}
