// Package agentapp runs the node agent's gRPC server (the Cubelet services
// the master calls, plus gRPC health) on a listener, for the nodeagent
// binary and for the node embedded in cubemaster dev.
package agentapp

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cubesandbox/templatecenter/adapters/cubelet/agent"
)

// Options configure Run.
type Options struct {
	DataDir string
	NodeID  string
	Logger  *slog.Logger
	// ShutdownTimeout is how long a stop waits for running calls before
	// cutting them.
	ShutdownTimeout time.Duration
	// Ready, when set, is called with the agent once it serves.
	Ready func(*agent.Agent)
}

// Run serves on ln until ctx ends, then stops gracefully.
func Run(ctx context.Context, o Options, ln net.Listener) error {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a, err := agent.New(agent.Config{DataDir: o.DataDir, NodeID: o.NodeID, Logger: log})
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	a.Register(srv)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	log.Info("node agent listening", "addr", ln.Addr().String(), "data_dir", a.DataDir(), "node_id", o.NodeID)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if o.Ready != nil {
		o.Ready(a)
	}
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	timeout := o.ShutdownTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	log.Info("node agent shutting down", "timeout", timeout)
	hs.Shutdown()
	stopped := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(timeout):
		log.Warn("calls still running after the shutdown timeout; cancelling them")
		srv.Stop()
		<-stopped
	}
	if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	log.Info("node agent stopped")
	return nil
}
