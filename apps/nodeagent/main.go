// Command nodeagent is the node side of CubeTemplateCenter's template
// distribution: a gRPC server that speaks the Cubelet protocol
// (Images.CreateImage/DestroyImage, CubeboxMgr.AppSnapshot/CleanupTemplate)
// so a control plane can use it in place of a Cubelet. It downloads ext4
// artifacts with their token, verifies and stores them, and records local
// run templates. It does NOT boot VMs. See package agent for the details.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cubesandbox/templatecenter/adapters/cubelet/agent"
)

const usageText = `Usage: nodeagent [flags]

nodeagent serves the Cubelet gRPC services the CubeTemplateCenter control
plane calls on a node: Images.CreateImage and DestroyImage (download, verify
and store ext4 rootfs artifacts; delete them) and CubeboxMgr.AppSnapshot and
CleanupTemplate (record and remove a local run template).

It does NOT boot VMs: AppSnapshot only checks that the artifacts are present
and writes <data-dir>/templates/<template id>/template.json. Use it for
development, tests and staging a node's disk; a real Cubelet is needed to run
sandboxes.

The listener has no authentication: bind it to an internal network only.
Every flag can also be set by the environment variable shown.

Flags:
`

type config struct {
	listen          string
	dataDir         string
	nodeID          string
	logLevel        string
	logFormat       string
	addrFile        string
	shutdownTimeout time.Duration
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	host, _ := os.Hostname()
	var c config
	fs := flag.NewFlagSet("nodeagent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.listen, "listen", envOr("CUBE_NODEAGENT_LISTEN", "127.0.0.1:9999"), "gRPC listen address host:port (CUBE_NODEAGENT_LISTEN)")
	fs.StringVar(&c.dataDir, "data-dir", envOr("CUBE_NODEAGENT_DATA_DIR", "/var/lib/cube-nodeagent"), "directory for artifacts and templates (CUBE_NODEAGENT_DATA_DIR)")
	fs.StringVar(&c.nodeID, "node-id", envOr("CUBE_NODEAGENT_NODE_ID", host), "node id used in logs and error messages (CUBE_NODEAGENT_NODE_ID)")
	fs.StringVar(&c.logLevel, "log-level", envOr("CUBE_NODEAGENT_LOG_LEVEL", "info"), "debug, info, warn or error (CUBE_NODEAGENT_LOG_LEVEL)")
	fs.StringVar(&c.logFormat, "log-format", envOr("CUBE_NODEAGENT_LOG_FORMAT", "json"), "json or text (CUBE_NODEAGENT_LOG_FORMAT)")
	fs.StringVar(&c.addrFile, "addr-file", envOr("CUBE_NODEAGENT_ADDR_FILE", ""), "write the bound address here once listening, e.g. with --listen 127.0.0.1:0 (CUBE_NODEAGENT_ADDR_FILE)")
	timeout := envOr("CUBE_NODEAGENT_SHUTDOWN_TIMEOUT", "30s")
	defTimeout, err := time.ParseDuration(timeout)
	if err != nil {
		return c, fmt.Errorf("CUBE_NODEAGENT_SHUTDOWN_TIMEOUT=%q: %w", timeout, err)
	}
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", defTimeout, "how long SIGTERM waits for running calls before cutting them (CUBE_NODEAGENT_SHUTDOWN_TIMEOUT)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageText)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	return c, nil
}

func newLogger(c config, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", c.logLevel, err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch c.logFormat {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want json or text", c.logFormat)
}

// run serves until ctx is done, then stops gracefully.
func run(ctx context.Context, c config, log *slog.Logger) error {
	a, err := agent.New(agent.Config{DataDir: c.dataDir, NodeID: c.nodeID, Logger: log})
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", c.listen, err)
	}
	srv := grpc.NewServer()
	a.Register(srv)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)

	addr := lis.Addr().String()
	if c.addrFile != "" {
		if err := os.WriteFile(c.addrFile, []byte(addr+"\n"), 0o644); err != nil {
			lis.Close()
			return fmt.Errorf("--addr-file: %w", err)
		}
	}
	log.Info("node agent listening", "addr", addr, "data_dir", a.DataDir(), "node_id", c.nodeID)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down", "timeout", c.shutdownTimeout)
	hs.Shutdown()
	stopped := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(c.shutdownTimeout):
		log.Warn("calls still running after the shutdown timeout; cancelling them")
		srv.Stop()
		<-stopped
	}
	if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	log.Info("stopped")
	return nil
}

func main() {
	c, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodeagent:", err)
		os.Exit(2)
	}
	log, err := newLogger(c, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodeagent:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, c, log); err != nil {
		log.Error("node agent failed", "err", err)
		os.Exit(1)
	}
}
