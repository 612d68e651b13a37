// Package agentapp runs the node agent's gRPC server (the Cubelet services
// the master calls, plus gRPC health) on a listener, for the nodeagent
// binary and for the node embedded in cubemaster dev.
package agentapp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cubesandbox/templatecenter/adapters/cubelet"
	"github.com/cubesandbox/templatecenter/adapters/cubelet/agent"
)

// Options configure Run.
type Options struct {
	DataDir string
	NodeID  string
	// Token is the node credential every call must carry, MasterURLs the
	// base URLs artifacts may come from, FileMode the mode of the files
	// written (see agent.Config).
	Token      string
	MasterURLs []string
	FileMode   os.FileMode
	// TLS serves gRPC over TLS with TLSCertFile and TLSKeyFile; with
	// TLSClientCAFile too, callers must present a certificate it signed
	// (mutual TLS). All empty: plain gRPC.
	TLSCertFile     string
	TLSKeyFile      string
	TLSClientCAFile string
	Logger          *slog.Logger
	// ShutdownTimeout is how long a stop waits for running calls before
	// cutting them.
	ShutdownTimeout time.Duration
	// Ready, when set, is called with the agent once it serves.
	Ready func(*agent.Agent)
}

// Server is a node agent ready to serve: its settings checked, its data
// dir made, its gRPC server built.
type Server struct {
	o   Options
	log *slog.Logger
	a   *agent.Agent
	srv *grpc.Server
	hs  *health.Server
	tls bool
}

// New checks o and builds the server, before anything listens: a bad
// setting fails the start-up naming it.
func New(o Options) (*Server, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	creds, err := serverTLS(o)
	if err != nil {
		return nil, err
	}
	a, err := agent.New(agent.Config{DataDir: o.DataDir, NodeID: o.NodeID, Token: o.Token, MasterURLs: o.MasterURLs,
		FileMode: o.FileMode, Logger: log})
	if err != nil {
		return nil, err
	}
	var opts []grpc.ServerOption
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	s := &Server{o: o, log: log, a: a, srv: a.NewServer(opts...), hs: health.NewServer(), tls: creds != nil}
	healthpb.RegisterHealthServer(s.srv, s.hs)
	return s, nil
}

// Run serves on ln until ctx ends, then stops gracefully.
func Run(ctx context.Context, o Options, ln net.Listener) error {
	s, err := New(o)
	if err != nil {
		return err
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx ends, then stops gracefully.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	o, log, a, srv, hs := s.o, s.log, s.a, s.srv, s.hs
	log.Info("node agent listening", "addr", ln.Addr().String(), "data_dir", a.DataDir(), "node_id", o.NodeID,
		"master_urls", o.MasterURLs, "tls", s.tls, "client_certificates", o.TLSClientCAFile != "")
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

// serverTLS is the transport credentials o asks for, or nil for plain
// gRPC. Errors name the flag to fix.
func serverTLS(o Options) (credentials.TransportCredentials, error) {
	if o.TLSCertFile == "" && o.TLSKeyFile == "" {
		if o.TLSClientCAFile != "" {
			return nil, errors.New("--tls-client-ca needs --tls-cert and --tls-key: client certificates are checked over TLS only")
		}
		return nil, nil
	}
	if o.TLSCertFile == "" || o.TLSKeyFile == "" {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	cert, err := tls.LoadX509KeyPair(o.TLSCertFile, o.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if o.TLSClientCAFile != "" {
		pool, err := cubelet.LoadCertPool(o.TLSClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-client-ca: %w", err)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return credentials.NewTLS(cfg), nil
}
