// Command cubebench is the project's benchmark (make bench): it makes a
// realistic image from files on this machine, pushes it to a registry on
// loopback, and times this project's builders against upstream's
// dockerless pipeline, a plain flatten + tar -x + mkfs.ext4 -d and the
// decode bound, interleaved over several rounds; then the services:
// artifact downloads, status polling and distribution to node agents;
// how a cold build grows to a ~4 GiB image; a rebuild to 8 nodes behind
// shaped links with chunks on and off.
// See internal/tools/bench/README.md.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cubesandbox/templatecenter/internal/tools/bench"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "extract" {
		if err := extract(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "cubebench extract:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == bench.RSSHelper {
		os.Exit(bench.RunRSSHelper(os.Args[2:]))
	}
	var o bench.Options
	flag.StringVar(&o.Bin, "bin", "bin", "directory with templatecenter, cubemaster, nodeagent and ext4stream (make build)")
	flag.StringVar(&o.Work, "work", "/var/tmp/cube-bench", "scratch directory (the image is kept here between runs)")
	flag.StringVar(&o.Registry, "registry", os.Getenv("CUBE_TEST_REGISTRY"), "registry host:port on loopback")
	flag.StringVar(&o.MySQLDSN, "mysql", os.Getenv("CUBE_TEST_MYSQL_DSN"), "MariaDB DSN for the services part")
	flag.IntVar(&o.Rounds, "rounds", 3, "interleaved rounds")
	flag.StringVar(&o.Builders, "builders", "ext4stream,ext4stream@builtin-gzip,plugin:ext4stream,mkfs",
		"our builders to time (NAME@builtin-gzip: gzip decoded in Go instead of by igzip)")
	flag.StringVar(&o.Parts, "parts", "builds,services,links,scale,linkchunks", "what to run: builds, services (node agents on loopback), links (the services part again, a shaped link per node agent; root and iproute2), scale (a cold build of the bench image and of a ~4 GiB one), linkchunks (a rebuild to 8 nodes behind shaped links, chunks on and off; root and iproute2), chunks (what a node receives with chunks; alone it needs no registry or binaries)")
	flag.StringVar(&o.Only, "only", "", "comma-separated pipeline names to run (default all)")
	flag.StringVar(&o.Report, "report", "", "also write the report (markdown) to this file")
	flag.StringVar(&o.Baseline, "baseline", "", "bin directory of an earlier build to time in the same rounds (its default mkfs and its ext4stream plugin, cold)")
	flag.IntVar(&o.NodeLinkMbit, "node-link", 400, "links part: the Mbit/s of each node agent's link (all 8 together must stay well inside what the machine can hash and write)")
	flag.IntVar(&o.ChunkLinkMbit, "chunk-link", 150, "linkchunks part: the Mbit/s of each node agent's link (slow enough that 8 whole files take a while, fast enough that the part stays within minutes)")
	flag.BoolVar(&o.Profile, "profile", false, "write CPU and allocation profiles of our default builder's cold build under -work/profiles")
	flag.Parse()
	self, err := os.Executable()
	if err != nil {
		fatal(err)
	}
	o.Self = self
	if o.Bin, err = filepath.Abs(o.Bin); err != nil {
		fatal(err)
	}
	out := io.Writer(os.Stdout)
	var rep strings.Builder
	if o.Report != "" {
		out = io.MultiWriter(os.Stdout, &rep)
	}
	start := time.Now()
	if err := bench.Main(o, out, func(f string, a ...any) { fmt.Fprintf(os.Stderr, "cubebench: "+f+"\n", a...) }); err != nil {
		fatal(err)
	}
	if o.Report != "" {
		if err := os.WriteFile(o.Report, []byte(rep.String()), 0o644); err != nil {
			fatal(err)
		}
	}
	fmt.Fprintf(os.Stderr, "cubebench: done in %s\n", time.Since(start).Round(time.Second))
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "cubebench:", err)
	os.Exit(1)
}

// extract writes the flattened tree of an image to stdout with
// go-containerregistry's mutate.Extract: the "flatten" of the flatten +
// tar -x + mkfs.ext4 -d reference pipeline.
func extract(args []string) error {
	fs := flag.NewFlagSet("extract", flag.ContinueOnError)
	insecure := fs.Bool("insecure", false, "plain HTTP registry")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var opts []name.Option
	if *insecure {
		opts = append(opts, name.Insecure)
	}
	r, err := name.ParseReference(fs.Arg(0), opts...)
	if err != nil {
		return err
	}
	img, err := remote.Image(r)
	if err != nil {
		return err
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	_, err = io.Copy(os.Stdout, rc)
	return err
}
