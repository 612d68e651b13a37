package agent_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"

	"google.golang.org/grpc"

	"github.com/cubesandbox/templatecenter/adapters/cubelet"
	"github.com/cubesandbox/templatecenter/adapters/cubelet/agent"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/nodeagenttest"
)

// harness runs the agent in-process behind a real gRPC server on loopback
// and reaches it with the cubelet client.
type harness struct {
	agent  *agent.Agent
	srv    *grpc.Server
	addr   string
	client *cubelet.Client
}

const nodeToken = "conformance-node-token"

func newHarness(ctx context.Context, t *testing.T, cfg nodeagenttest.HarnessConfig) (nodeagenttest.Harness, error) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := agent.New(agent.Config{DataDir: t.TempDir(), NodeID: "node-test", Token: nodeToken,
		MasterURLs: []string{cfg.ArtifactBaseURL}, Logger: log})
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := a.NewServer()
	go srv.Serve(lis)
	dial, _, err := cubelet.NodeCredentials{Token: nodeToken}.DialOptions()
	if err != nil {
		return nil, err
	}
	return &harness{agent: a, srv: srv, addr: lis.Addr().String(), client: cubelet.New(cubelet.Options{Logger: log, DialOptions: dial})}, nil
}

func (h *harness) MakeAgent(context.Context) (ports.NodeAgent, ports.Node, error) {
	return h.client, ports.Node{ID: "node-test", IP: "127.0.0.1", InstanceType: "cubebox", Addr: h.addr, Healthy: true}, nil
}

func (h *harness) ArtifactFile(instanceType, artifactID string) string {
	return h.agent.ArtifactFile(instanceType, artifactID)
}

func (h *harness) Close() {
	h.client.Close()
	h.srv.Stop()
}

func TestConformance(t *testing.T) {
	nodeagenttest.RunConformanceTests(t, newHarness)
}
