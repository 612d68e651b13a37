package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"time"

	"github.com/samber/do/v2"
	"github.com/spf13/cobra"

	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/apps/internal/tcapp"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/pipeline"
	"github.com/cubesandbox/templatecenter/ports"
)

type buildFlags struct {
	image, out, builder, platform string
	insecure, trusted             []string
	jsonOut                       bool
	writableLayerSize             string
	username                      string
	envdFile, caFile              string
}

// buildReport is the --json output.
type buildReport struct {
	ImageRef          string           `json:"image_ref"`
	ImageDigest       string           `json:"image_digest"`
	Platform          string           `json:"platform"`
	Fingerprint       string           `json:"template_spec_fingerprint"`
	ArtifactID        string           `json:"artifact_id"`
	SHA256            string           `json:"sha256"`
	SizeBytes         int64            `json:"size_bytes"`
	Builder           string           `json:"builder"`
	Out               string           `json:"out"`
	Layers            int              `json:"layers"`
	Entries           int              `json:"entries"`
	ContentBytes      int64            `json:"content_bytes"`
	PhasesMS          map[string]int64 `json:"phases_ms"`
	TotalMS           int64            `json:"total_ms"`
	WritableLayerSize string           `json:"writable_layer_size"`
	// The CubeEgress CA bake (--cube-ca), as the artifact row records it.
	CubeEgressCABaked          bool     `json:"cube_egress_ca_baked"`
	CubeEgressCAFingerprint    string   `json:"cube_egress_ca_fingerprint,omitempty"`
	CubeEgressCATargetsWritten int      `json:"cube_egress_ca_targets_written"`
	CubeEgressCANotes          []string `json:"cube_egress_ca_notes,omitempty"`
}

func buildCommand() *cobra.Command {
	var f buildFlags
	cmd := &cobra.Command{
		Use:   "build --image REF --out FILE",
		Short: "Build one image into an ext4 root filesystem file",
		Long: `Resolves REF to a manifest digest for the platform, pulls and verifies its layers,
flattens them safely and writes a reproducible ext4 image to FILE.

The registry password, if needed, is read from CUBE_REGISTRY_PASSWORD (never a flag,
so it stays out of process listings); --registry-username names the user.

The image is written in a .cube-build-* directory beside FILE and renamed onto FILE
once whole; a build killed mid-way leaves that directory, and the next build beside
FILE removes it. FILE is not fsynced (run sync if it must survive a power loss). With --json, phases_ms
gives pull (until the last layer arrived) and flatten_and_build (from the first layer
byte to the written image); they overlap, since layers are decoded as they download,
and hash is 0 when the builder hashed the image as it wrote it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBuild(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.image, "image", "", "image reference to build (required)")
	fl.StringVar(&f.out, "out", "", "path of the ext4 file to write (required); a file already there is replaced only by a successful build")
	fl.StringVar(&f.builder, "builder", "", `"ext4stream" (pure Go, in process), "mkfs" (e2fsprogs) or "plugin:NAME" for a builder plugin (default from config, "ext4stream")`)
	fl.StringVar(&f.platform, "platform", core.DefaultPlatform, "platform to resolve, OS/ARCH[/VARIANT]")
	fl.StringArrayVar(&f.insecure, "insecure-registry", nil, "registry HOST[:PORT] spoken to over plain HTTP, allowed on loopback/private addresses (repeatable)")
	fl.StringArrayVar(&f.trusted, "allow-registry", nil, "registry HOST[:PORT] (HTTPS) allowed on loopback/private addresses (repeatable)")
	fl.BoolVar(&f.jsonOut, "json", false, "print one JSON object describing the result")
	fl.StringVar(&f.writableLayerSize, "writable-layer-size", "20Gi", "writable layer size recorded in the template spec fingerprint")
	fl.StringVar(&f.username, "registry-username", "", "registry user (password from CUBE_REGISTRY_PASSWORD)")
	fl.StringVar(&f.envdFile, "envd", "", "agent binary to inject at "+pipeline.EnvdInImagePath)
	fl.StringVar(&f.caFile, "cube-ca", "", "CubeEgress root CA (one PEM certificate) to bake into the image's trust stores, as upstream's with_cube_ca does (its file: "+core.CubeCAPath+")")
	fl.StringVar(&f.caFile, "ca-bundle", "", "same as --cube-ca")
	_ = fl.MarkHidden("ca-bundle")
	_ = cmd.MarkFlagRequired("image")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}

func runBuild(cmd *cobra.Command, f buildFlags) error {
	ctx := cmd.Context()
	stop, err := startProfiles()
	if err != nil {
		return err
	}
	defer stop()
	cfg, err := config.Load(nil)
	if err != nil {
		return err
	}
	warn(cmd, cfg.Warnings)
	out, err := filepath.Abs(f.out)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o700); err != nil {
		return fmt.Errorf("work dir %s (CUBE_TEMPLATE_CENTER_ARTIFACT_WORK_DIR): %w", cfg.WorkDir, err)
	}
	var inj pipeline.Injection
	if f.envdFile != "" {
		if inj.Envd, err = os.ReadFile(f.envdFile); err != nil {
			return fmt.Errorf("--envd: %w", err)
		}
	}
	if f.caFile != "" {
		if inj.CA, err = os.ReadFile(f.caFile); err != nil {
			return fmt.Errorf("--cube-ca: %w", err)
		}
	}

	inj2 := tcapp.NewBuildInjector(ctx, tcapp.Options{Config: cfg, Builder: f.builder, InsecureRegistries: f.insecure, TrustedRegistries: f.trusted})
	defer inj2.Shutdown()
	pl, err := do.Invoke[*pipeline.Pipeline](inj2)
	if err != nil {
		return err
	}

	req := &core.FromImageRequest{
		SourceImageRef: f.image, WritableLayerSize: f.writableLayerSize, TemplateID: "one-shot", Platform: f.platform,
	}
	if len(inj.Envd) > 0 {
		req.ContainerOverrides = &core.ContainerOverrides{Annotations: map[string]string{pipeline.InjectEnvdAnnotation: "true"}}
	}
	spec, err := core.NormalizeFromImageRequest(req, nil)
	if err != nil {
		return err
	}
	progress := newProgressPrinter(cmd.ErrOrStderr(), !f.jsonOut)
	start := time.Now()
	res, err := pl.Run(ctx, pipeline.Input{
		Image:   ports.ImageRequest{Ref: f.image, Platform: f.platform, Username: f.username, Password: os.Getenv("CUBE_REGISTRY_PASSWORD")},
		Request: spec,
		Inject:  inj,
		OutPath: out,
	}, progress.event)
	progress.done()
	if err != nil {
		return err
	}
	rep := buildReport{
		ImageRef: res.Image.Ref, ImageDigest: res.Image.Digest, Platform: res.Image.Platform,
		Fingerprint: res.Fingerprint, ArtifactID: res.ArtifactID, SHA256: res.SHA256, SizeBytes: res.SizeBytes,
		Builder: pl.Builder.Name(), Out: res.Path, Layers: res.Layers, Entries: res.Tree.Entries,
		ContentBytes: res.Tree.ContentBytes, PhasesMS: map[string]int64{}, TotalMS: time.Since(start).Milliseconds(),
		WritableLayerSize: req.WritableLayerSize,
		CubeEgressCABaked: res.CA.Baked, CubeEgressCAFingerprint: res.CA.Fingerprint,
		CubeEgressCATargetsWritten: res.CA.TargetsWritten, CubeEgressCANotes: res.CA.Notes,
	}
	for ph, d := range res.Phases {
		rep.PhasesMS[phaseLabel(ph)] = d.Milliseconds()
	}
	if f.jsonOut {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "built %s\n  image      %s@%s\n  artifact   %s\n  sha256     %s\n  size       %d bytes (%.1f MiB)\n  builder    %s\n  time       %.1fs\n",
		rep.Out, f.image, rep.ImageDigest, rep.ArtifactID, rep.SHA256, rep.SizeBytes, float64(rep.SizeBytes)/(1<<20), rep.Builder, float64(rep.TotalMS)/1000)
	return nil
}

// startProfiles writes CPU and allocation profiles and an execution trace
// of the build when CUBE_TEMPLATE_CENTER_CPUPROFILE /
// CUBE_TEMPLATE_CENTER_MEMPROFILE / CUBE_TEMPLATE_CENTER_TRACE name files
// (the benchmark's -profile uses the first two; the trace shows which work
// waits on which).
func startProfiles() (stop func(), err error) {
	cpu, mem := os.Getenv("CUBE_TEMPLATE_CENTER_CPUPROFILE"), os.Getenv("CUBE_TEMPLATE_CENTER_MEMPROFILE")
	stop = func() {}
	if tr := os.Getenv("CUBE_TEMPLATE_CENTER_TRACE"); tr != "" {
		f, err := os.Create(tr)
		if err != nil {
			return nil, fmt.Errorf("trace: %w", err)
		}
		if err := trace.Start(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("trace: %w", err)
		}
		stop = func() { trace.Stop(); f.Close() }
	}
	if cpu != "" {
		f, err := os.Create(cpu)
		if err != nil {
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
		traceStop := stop
		stop = func() { pprof.StopCPUProfile(); f.Close(); traceStop() }
	}
	if mem != "" {
		runtime.MemProfileRate = 64 << 10
		cpuStop := stop
		stop = func() {
			cpuStop()
			if f, err := os.Create(mem); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}
	}
	return stop, nil
}

// phaseLabel names phases in the JSON report by what they measured.
func phaseLabel(p core.Phase) string {
	switch p {
	case core.PhasePulling:
		return "pull"
	case core.PhaseBuildingExt4:
		return "flatten_and_build"
	case core.PhaseGeneratingJSON:
		return "hash"
	case core.PhaseUploading:
		return "upload"
	}
	return strings.ToLower(string(p))
}

// progressPrinter shows phases and pull progress on stderr.
type progressPrinter struct {
	w       io.Writer
	on      bool
	tty     bool
	phase   core.Phase
	lastPct int
}

func newProgressPrinter(w io.Writer, on bool) *progressPrinter {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &progressPrinter{w: w, on: on, tty: tty, lastPct: -1}
}

func (p *progressPrinter) event(e pipeline.Event) {
	if !p.on {
		return
	}
	if e.Resolved != nil {
		p.line(fmt.Sprintf("resolved %s, artifact %s", e.Resolved.ImageDigest, e.Resolved.ArtifactID))
	}
	if e.Pull.TotalBytes > 0 && p.tty {
		pct := int(100 * e.Pull.DownloadedBytes / e.Pull.TotalBytes)
		if pct != p.lastPct {
			p.lastPct = pct
			const width = 30
			bar := strings.Repeat("█", pct*width/100) + strings.Repeat("░", width-pct*width/100)
			fmt.Fprintf(p.w, "\rpull %s %3d%%  layers %d/%d  %.1f MB/s ", bar, pct, e.Pull.CompletedLayers, e.Pull.TotalLayers, float64(e.Pull.SpeedBPS)/1e6)
		}
	}
	if e.Phase != p.phase {
		p.phase = e.Phase
		p.line(fmt.Sprintf("%-14s %3d%%", e.Phase, e.Progress))
	}
}

func (p *progressPrinter) line(s string) {
	if p.tty && p.lastPct >= 0 {
		fmt.Fprint(p.w, "\n")
		p.lastPct = -1
	}
	fmt.Fprintln(p.w, s)
}

func (p *progressPrinter) done() {
	if p.on && p.tty && p.lastPct >= 0 {
		fmt.Fprint(p.w, "\n")
	}
}
