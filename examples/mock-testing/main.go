// Command mock-testing shows how to unit-test code that depends on ports
// with the moq mocks in ports/portsmock. The code under test is Warmer
// (warm.go); the table-driven test is warm_test.go.
//
// Run as a program it does a dry run: the same mocks, wired to print what
// a real node agent would be asked to do.
//
//	go run ./examples/mock-testing
//	go test ./examples/mock-testing -v
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/portsmock"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, w io.Writer) error {
	// A mock is a struct of functions, one per method; only the methods
	// the code under test calls need one (the others panic if called).
	nodes := &portsmock.NodeDirectoryMock{
		HealthyNodesFunc: func(_ context.Context, instanceType string) ([]ports.Node, error) {
			return []ports.Node{
				{ID: "node-a", IP: "10.0.0.11", Addr: "10.0.0.11:9999", InstanceType: instanceType, Healthy: true},
				{ID: "node-b", IP: "10.0.0.12", Addr: "10.0.0.12:9999", InstanceType: instanceType, Healthy: true},
			}, nil
		},
	}
	agent := &portsmock.NodeAgentMock{
		CreateImageFunc: func(_ context.Context, n ports.Node, art core.NodeArtifact) error {
			fmt.Fprintf(w, "dry run: CreateImage(%s) on %s at %s\n", art.ArtifactID, n.ID, n.Addr)
			return nil
		},
	}
	warmer := &Warmer{Nodes: nodes, Agent: agent}
	warmed, err := warmer.Warm(ctx, "cubebox", "rfs-0123456789abcdef01234567")
	if err != nil {
		return err
	}
	// Every mock records its calls: that is what tests assert on.
	fmt.Fprintf(w, "warmed %v: %d directory call(s), %d CreateImage call(s)\n",
		warmed, len(nodes.HealthyNodesCalls()), len(agent.CreateImageCalls()))
	return nil
}
