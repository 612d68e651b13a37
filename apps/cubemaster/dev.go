package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cubesandbox/templatecenter/adapters/builder/ext4stream"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/console"
	"github.com/cubesandbox/templatecenter/adapters/progress/memprogress"
	"github.com/cubesandbox/templatecenter/adapters/sealer"
	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/apps/internal/agentapp"
	"github.com/cubesandbox/templatecenter/apps/internal/devimage"
	"github.com/cubesandbox/templatecenter/apps/internal/logging"
	"github.com/cubesandbox/templatecenter/apps/internal/masterapp"
	"github.com/cubesandbox/templatecenter/apps/internal/startup"
	"github.com/cubesandbox/templatecenter/apps/internal/tcapp"
)

// devNodeID is the embedded node's id, the one the docs' examples use.
const devNodeID = config.NodeAgentNodeID

type devFlags struct {
	dataDir                             string
	listen, tcListen, nodeListen, regLn string
	// regChosen: --registry-listen was given, so a busy port is an error
	// rather than a reason to pick another.
	regChosen           bool
	insecure, trusted   []string
	readyFile           string
	logLevel, logFormat string
}

// DefaultRegistryListen is the example registry's address: fixed, so the
// example image keeps its name from one run to the next (templates built
// from it can be redone), and unusual, so it is seldom taken.
const DefaultRegistryListen = "127.0.0.1:15000"

// DevInfo is what dev writes to --ready-file once everything answers: the
// addresses and paths a script (make demo) needs.
type DevInfo struct {
	Master string `json:"master"`
	// Console is the web console's URL (on the master's listener).
	Console        string `json:"console"`
	TemplateCenter string `json:"template_center"`
	NodeID         string `json:"node_id"`
	NodeAddr       string `json:"node_addr"`
	NodeDataDir    string `json:"node_data_dir"`
	Registry       string `json:"registry"`
	ExampleImage   string `json:"example_image"`
	DataDir        string `json:"data_dir"`
	Database       string `json:"database"`
	ArtifactStore  string `json:"artifact_store"`
	Builder        string `json:"builder"`
}

func devCommand() *cobra.Command {
	var f devFlags
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run everything in one process on loopback, with an example image (try it out)",
		Long: `Runs the master, the data plane, one node agent (node-1) and an OCI registry
serving a small example image, in one process, on loopback only, on the
embedded defaults: SQLite and a file:// artifact store under --data-dir, live
progress in memory, the pure-Go ext4stream builder in-process, a callback
token and a node credential generated for this run (the node agent downloads
from this master only), the local registry allowed, and no public API
authentication (loopback only; serve turns it on). It works offline.

It ignores CUBE_* settings: its flags are its only knobs. Once everything
answers it prints the addresses and the next command; stop it with Ctrl-C.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.regChosen = cmd.Flags().Changed("registry-listen")
			return runDev(cmd.Context(), f, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dataDir, "data-dir", filepath.Join(config.UserDirs().State, "dev"), "directory for the database, artifacts, layer cache and the node's files (created)")
	fl.StringVar(&f.listen, "listen", "127.0.0.1:8089", "master API address (loopback; cubemastercli's default)")
	fl.StringVar(&f.tcListen, "tc-listen", "127.0.0.1:0", "data plane address (loopback; 0 picks a free port)")
	fl.StringVar(&f.nodeListen, "node-listen", "127.0.0.1:0", "node agent gRPC address (loopback)")
	fl.StringVar(&f.regLn, "registry-listen", DefaultRegistryListen, "example OCI registry address (loopback); the default port, when taken, gives way to a free one")
	fl.StringArrayVar(&f.insecure, "insecure-registry", nil, "another registry HOST[:PORT] to allow over plain HTTP (repeatable)")
	fl.StringArrayVar(&f.trusted, "allow-registry", nil, "another registry HOST[:PORT] (HTTPS) to allow on loopback/private addresses (repeatable)")
	fl.StringVar(&f.readyFile, "ready-file", "", "write the addresses as JSON to this file once everything answers")
	fl.StringVar(&f.logLevel, "log-level", "warn", "debug, info, warn or error")
	fl.StringVar(&f.logFormat, "log-format", "text", "json or text")
	return cmd
}

// listenFallback is listenLoopback for an address with a default: when
// the user did not choose it and its port is taken, a free port is used
// instead, and warn says so.
func listenFallback(flag, addr string, chosen bool, warn io.Writer) (net.Listener, error) {
	ln, err := listenLoopback(flag, addr)
	if err == nil || chosen || !errors.Is(err, syscall.EADDRINUSE) {
		return ln, err
	}
	host, _, _ := net.SplitHostPort(addr)
	ln, err2 := listenLoopback(flag, net.JoinHostPort(host, "0"))
	if err2 != nil {
		return nil, err
	}
	fmt.Fprintf(warn, "cubemaster dev: %s is taken; --%s uses %s this time, so the example image's name differs from other runs (pass --%s to choose)\n",
		addr, flag, ln.Addr(), flag)
	return ln, nil
}

// listenLoopback listens on addr, refusing anything but loopback.
func listenLoopback(flag, addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--%s %q: %w", flag, addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("--%s %q: dev mode listens on loopback only (127.0.0.1 or ::1)", flag, addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--%s %s: %w (pass --%s 127.0.0.1:0 for a free port)", flag, addr, err, flag)
	}
	return ln, nil
}

func runDev(ctx context.Context, f devFlags, stdout, stderr io.Writer) (err error) {
	log, err := logging.New(stderr, f.logLevel, f.logFormat)
	if err != nil {
		return err
	}
	dataDir, err := filepath.Abs(f.dataDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("--data-dir %s: %w", dataDir, err)
	}

	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	listen := func(flag, addr string) net.Listener {
		if err != nil {
			return nil
		}
		var ln net.Listener
		ln, err = listenLoopback(flag, addr)
		if ln != nil {
			lns = append(lns, ln)
		}
		return ln
	}
	masterLn, tcLn, nodeLn := listen("listen", f.listen), listen("tc-listen", f.tcListen), listen("node-listen", f.nodeListen)
	if err != nil {
		return err
	}
	regLn, err := listenFallback("registry-listen", f.regLn, f.regChosen, stderr)
	if err != nil {
		return err
	}
	lns = append(lns, regLn)

	reg, err := devimage.Serve(ctx, regLn)
	if err != nil {
		return err
	}
	defer reg.Close()

	// Secrets of this run: the callback token, and the node credential
	// the master sends its embedded node agent.
	token, nodeToken := make([]byte, 32), make([]byte, 32)
	if _, err := rand.Read(token); err != nil {
		return err
	}
	if _, err := rand.Read(nodeToken); err != nil {
		return err
	}
	masterURL, tcURL := "http://"+masterLn.Addr().String(), "http://"+tcLn.Addr().String()
	cfg := config.Defaults()
	cfg.DBDSN = "sqlite://" + filepath.Join(dataDir, "cube.db")
	cfg.Master.DBDSN = cfg.DBDSN
	cfg.ArtifactStoreDir = filepath.Join(dataDir, "artifacts")
	cfg.WorkDir = filepath.Join(dataDir, "work")
	cfg.LayerCacheDir = filepath.Join(dataDir, "layer-cache")
	cfg.Builder = ext4stream.Name
	cfg.CallbackToken = hex.EncodeToString(token)
	// Registry credentials are sealed with a key kept beside the data,
	// made on the first run.
	cfg.Master.SealingKeyFile = filepath.Join(dataDir, "sealing.keys")
	if _, err := sealer.CreateKeyFile(cfg.Master.SealingKeyFile); err != nil {
		return fmt.Errorf("sealing key file: %w", err)
	}
	cfg.InsecureRegistries = append([]string{reg.Host()}, f.insecure...)
	cfg.TrustedRegistries = f.trusted
	cfg.RegistryAllowLoopback = true
	cfg.Listen, cfg.MasterAddr = tcLn.Addr().String(), masterURL
	cfg.Master.Listen, cfg.Master.TemplateCenterAddr = masterLn.Addr().String(), tcURL
	cfg.Master.Nodes = devNodeID + "=" + nodeLn.Addr().String()
	cfg.Master.NodeToken = hex.EncodeToString(nodeToken)
	cfg.Master.EnvdHostDir = filepath.Join(dataDir, "envd")
	// Loopback only, for the person at the keyboard: no public API
	// credentials (answers still hide download tokens).
	cfg.Master.Auth.Enabled = false

	// One database, one lock table and one progress sink for both planes:
	// the master reads the live pull counters the data plane writes.
	st, err := startup.OpenStore(ctx, "--data-dir", cfg.DBDSN)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := startup.Migrate(ctx, st, cfg.DBDSN, log); err != nil {
		return err
	}
	locker, err := startup.Locker(st, cfg.DBDSN)
	if err != nil {
		return err
	}
	progress := memprogress.New()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 3)
	run := func(name string, fn func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(); err != nil && !errors.Is(err, context.Canceled) {
				errc <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		}()
	}
	nodeDir := filepath.Join(dataDir, "node")
	run("node agent", func() error {
		return agentapp.Run(ctx, agentapp.Options{DataDir: nodeDir, NodeID: devNodeID, Logger: log.With("component", "nodeagent"),
			Token: cfg.Master.NodeToken, MasterURLs: []string{masterURL}, ShutdownTimeout: 5 * time.Second}, nodeLn)
	})
	run("data plane", func() error {
		return tcapp.Run(ctx, tcapp.Options{Config: cfg, Logger: log.With("component", "templatecenter"),
			Store: st, Locker: locker, Progress: progress, RootfsBuilder: ext4stream.New()}, tcLn)
	})
	run("master", func() error {
		return masterapp.Run(ctx, masterapp.Options{Config: cfg, Logger: log.With("component", "cubemaster"),
			Store: st, Locker: locker, Progress: progress}, masterLn)
	})

	info := DevInfo{Master: masterURL, Console: masterURL + console.Path, TemplateCenter: tcURL, NodeID: devNodeID, NodeAddr: nodeLn.Addr().String(),
		NodeDataDir: nodeDir, Registry: reg.Host(), ExampleImage: reg.Ref(), DataDir: dataDir,
		Database: cfg.DBDSN, ArtifactStore: "file://" + cfg.ArtifactStoreDir, Builder: cfg.Builder + " (in-process)"}
	if err := waitReady(ctx, masterURL+"/ready"); err != nil {
		cancel()
		wg.Wait()
		select {
		case e := <-errc:
			return e
		default:
		}
		return err
	}
	printBanner(stdout, info, f.listen)
	if f.readyFile != "" {
		b, _ := json.MarshalIndent(info, "", "  ")
		if err := os.WriteFile(f.readyFile, append(b, '\n'), 0o600); err != nil {
			cancel()
			wg.Wait()
			return fmt.Errorf("--ready-file: %w", err)
		}
	}
	<-ctx.Done()
	wg.Wait()
	select {
	case e := <-errc:
		return e
	default:
	}
	fmt.Fprintln(stdout, "cubemaster dev stopped")
	return nil
}

// waitReady polls /ready until it answers 200: the data plane, the
// database and the node are all up.
func waitReady(ctx context.Context, url string) error {
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = string(b)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("not ready after 60s: %s", last)
}

func printBanner(w io.Writer, i DevInfo, listenFlag string) {
	cli := "bin/cubemastercli"
	if listenFlag != "127.0.0.1:8089" {
		cli += " -a " + i.Master[len("http://"):]
	}
	fmt.Fprintf(w, `cubemaster dev is running (everything on loopback; data in %s)

  master API       %s   (public /cube/* API, /ready, /metrics, /openapi.json)
  web console      %s   (no token needed in dev)
  data plane       %s   (internal API and downloads)
  node agent       %s at %s   (artifacts under %s)
  OCI registry     %s   (example image %s)
  database         %s
  artifact store   %s
  builder          %s

Next, in another terminal:
  %s tpl create-from-image --image %s --writable-layer-size 1Gi
  %s tpl list

Stop with Ctrl-C.
`, i.DataDir, i.Master, i.Console, i.TemplateCenter, i.NodeID, i.NodeAddr, i.NodeDataDir, i.Registry, i.ExampleImage,
		i.Database, i.ArtifactStore, i.Builder, cli, i.ExampleImage, cli)
}
