// Command nodeagent is the node side of CubeTemplateCenter's template
// distribution: a gRPC server that speaks the Cubelet protocol
// (Images.CreateImage/DestroyImage, CubeboxMgr.AppSnapshot/CleanupTemplate)
// so a control plane can use it in place of a Cubelet. It downloads ext4
// artifacts with their token, verifies and stores them, and records local
// run templates. It does NOT boot VMs. See package agent for the details.
//
//	CUBE_NODEAGENT_TOKEN=... nodeagent --master-urls http://master:8089 [--listen 127.0.0.1:9999] [--data-dir DIR]
//	    [--node-id node-1] [--file-mode 0640] [--tls-cert F --tls-key F [--tls-client-ca F]] [--log-level L] [--log-format F]
//	nodeagent --version
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cubesandbox/templatecenter/adapters/cubelet"
	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/apps/internal/agentapp"
	"github.com/cubesandbox/templatecenter/apps/internal/cmdutil"
	"github.com/cubesandbox/templatecenter/apps/internal/logging"
	"github.com/cubesandbox/templatecenter/apps/internal/version"
)

const longHelp = `nodeagent serves the Cubelet gRPC services the CubeTemplateCenter control
plane calls on a node: Images.CreateImage and DestroyImage (download, verify
and store ext4 rootfs artifacts; delete them) and CubeboxMgr.AppSnapshot and
CleanupTemplate (record and remove a local run template).

It does NOT boot VMs: AppSnapshot only checks that the artifacts are present
and writes <data-dir>/templates/<template id>/template.json. Use it for
development, tests and staging a node's disk; a real Cubelet is needed to run
sandboxes.

Every call must carry the node credential in CUBE_NODEAGENT_TOKEN (the
master's CUBE_MASTER_NODE_TOKEN); the agent refuses to start without it.
Artifacts are downloaded only from URLs under --master-urls (required).
Files are written 0640 in 0750 directories (--file-mode). Still, bind the
listener to an internal network. Every flag's default can also be set by the
environment variable shown (docs/configuration.md). The default node id,
node-1, is the one the master's examples use
(CUBE_MASTER_NODES=node-1=127.0.0.1:9999).`

type agentConfig struct {
	listen          string
	dataDir         string
	nodeID          string
	token           string
	masterURLs      string
	fileMode        string
	tlsCert         string
	tlsKey          string
	tlsClientCA     string
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

// newRoot builds the command; run is called with the parsed settings.
func newRoot(run func(cmd *cobra.Command, c agentConfig) error) (*cobra.Command, error) {
	var c agentConfig
	root := &cobra.Command{
		Use:           "nodeagent",
		Short:         "Cubelet-compatible node agent: stores template artifacts on a node (boots no VMs)",
		Long:          longHelp,
		Args:          cmdutil.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE:          func(cmd *cobra.Command, _ []string) error { return run(cmd, c) },
	}
	version.Set(root)
	fl := root.Flags()
	for _, s := range config.NodeAgentSettings() {
		def := envOr(s.Env, s.Default)
		usage := s.Doc + " (" + s.Env + ")"
		switch s.Flag {
		case "":
			if s.Env != config.NodeAgentTokenVariable {
				return nil, fmt.Errorf("nodeagent: setting %s has no flag and is not read", s.Env)
			}
			c.token = os.Getenv(s.Env)
		case "master-urls":
			fl.StringVar(&c.masterURLs, s.Flag, def, usage)
		case "file-mode":
			fl.StringVar(&c.fileMode, s.Flag, def, usage)
		case "tls-cert":
			fl.StringVar(&c.tlsCert, s.Flag, def, usage)
		case "tls-key":
			fl.StringVar(&c.tlsKey, s.Flag, def, usage)
		case "tls-client-ca":
			fl.StringVar(&c.tlsClientCA, s.Flag, def, usage)
		case "listen":
			fl.StringVar(&c.listen, s.Flag, def, usage)
		case "data-dir":
			fl.StringVar(&c.dataDir, s.Flag, def, usage)
		case "node-id":
			fl.StringVar(&c.nodeID, s.Flag, def, usage)
		case "log-level":
			fl.StringVar(&c.logLevel, s.Flag, def, usage)
		case "log-format":
			fl.StringVar(&c.logFormat, s.Flag, def, usage)
		case "addr-file":
			fl.StringVar(&c.addrFile, s.Flag, def, usage)
		case "shutdown-timeout":
			d, err := time.ParseDuration(def)
			if err != nil {
				return nil, fmt.Errorf("%s=%q: %w", s.Env, def, err)
			}
			fl.DurationVar(&c.shutdownTimeout, s.Flag, d, usage)
		default:
			return nil, fmt.Errorf("nodeagent: setting %s has no flag", s.Flag)
		}
	}
	return root, nil
}

func newLogger(c agentConfig, w io.Writer) (*slog.Logger, error) {
	log, err := logging.New(w, c.logLevel, c.logFormat)
	if err != nil {
		return nil, fmt.Errorf("--log-level/--log-format: %w", err)
	}
	return log, nil
}

// options checks what the agent needs before it listens and names the
// setting to fix: it fails closed without a credential or master URLs.
func options(c agentConfig, log *slog.Logger) (agentapp.Options, error) {
	o := agentapp.Options{DataDir: c.dataDir, NodeID: c.nodeID, Token: strings.TrimSpace(c.token), Logger: log,
		ShutdownTimeout: c.shutdownTimeout, TLSCertFile: c.tlsCert, TLSKeyFile: c.tlsKey, TLSClientCAFile: c.tlsClientCA}
	if o.Token == "" {
		return o, fmt.Errorf("%s is not set: the node agent refuses to start without the node credential every call must carry "+
			"(the master's CUBE_MASTER_NODE_TOKEN; generate one with `openssl rand -hex 32`)", config.NodeAgentTokenVariable)
	}
	if err := cubelet.CheckNodeToken(o.Token); err != nil {
		return o, fmt.Errorf("%s %w", config.NodeAgentTokenVariable, err)
	}
	for _, u := range strings.Split(c.masterURLs, ",") {
		if u = strings.TrimSpace(u); u != "" {
			o.MasterURLs = append(o.MasterURLs, u)
		}
	}
	if len(o.MasterURLs) == 0 {
		return o, errors.New("--master-urls (CUBE_NODEAGENT_MASTER_URLS) is not set: the node agent downloads artifacts only from its masters' base URLs (their CUBE_MASTER_DOWNLOAD_BASE_URL)")
	}
	mode, err := strconv.ParseUint(c.fileMode, 8, 32)
	if err != nil || mode&^0o777 != 0 || mode&0o600 != 0o600 {
		return o, fmt.Errorf("--file-mode (CUBE_NODEAGENT_FILE_MODE) %q: want octal permission bits with owner read and write, like 0640 or 0644", c.fileMode)
	}
	o.FileMode = os.FileMode(mode)
	return o, nil
}

// serve listens and runs the agent until ctx ends.
func serve(ctx context.Context, c agentConfig, log *slog.Logger) error {
	o, err := options(c, log)
	if err != nil {
		return err
	}
	srv, err := agentapp.New(o)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", c.listen, err)
	}
	defer lis.Close()
	if c.addrFile != "" {
		if err := os.WriteFile(c.addrFile, []byte(lis.Addr().String()+"\n"), 0o644); err != nil {
			return fmt.Errorf("--addr-file: %w", err)
		}
	}
	return srv.Serve(ctx, lis)
}

func main() {
	cmdutil.KeepRunningOnClosedOutput()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	root, err := newRoot(func(cmd *cobra.Command, c agentConfig) error {
		log, err := newLogger(c, cmd.ErrOrStderr())
		if err != nil {
			return err
		}
		if err := serve(cmd.Context(), c, log); err != nil {
			log.Error("node agent failed", "err", err)
			return err
		}
		return nil
	})
	if err == nil {
		err = root.ExecuteContext(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodeagent: "+cmdutil.OneLine(err))
		os.Exit(1)
	}
}
