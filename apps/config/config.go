package config

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Config is what the apps read at start-up.
type Config struct {
	ConfigPath string `yaml:"-"`

	// DBDSN selects the metadata store: sqlite://, mysql://, postgres://.
	DBDSN string `yaml:"db_dsn"`
	// ArtifactStoreDir is the local artifact directory (file:// store).
	ArtifactStoreDir string `yaml:"artifact_store_dir"`
	// ArtifactStoreURL overrides the store with a gocloud URL.
	ArtifactStoreURL string `yaml:"artifact_store_url"`
	// WorkDir holds build scratch space.
	WorkDir string `yaml:"artifact_work_dir"`
	// LayerCacheDir and LayerCacheMaxBytes bound the layer cache.
	LayerCacheDir      string `yaml:"layer_cache_dir"`
	LayerCacheMaxBytes int64  `yaml:"layer_cache_max_bytes"`

	MaxConcurrentBuilds int      `yaml:"max_concurrent_builds"`
	InsecureRegistries  []string `yaml:"insecure_registries"`
	AllowLocalLayouts   bool     `yaml:"allow_local_layouts"`
	// Registry egress: link-local and metadata addresses are always refused;
	// loopback and private addresses only for trusted hosts or when allowed.
	RegistryAllowPrivate  bool     `yaml:"registry_allow_private"`
	RegistryAllowLoopback bool     `yaml:"registry_allow_loopback"`
	TrustedRegistries     []string `yaml:"trusted_registries"`
	// Builder is "ext4stream" (the default, in process), "mkfs", or the
	// name of a builder plugin under PluginDir ("plugin:NAME").
	Builder        string `yaml:"builder"`
	PluginDir      string `yaml:"plugin_dir"`
	HeadroomBytes  int64  `yaml:"headroom_bytes"`
	HeadroomInodes int64  `yaml:"headroom_inodes"`
	MaxImageBytes  int64  `yaml:"max_image_bytes"`
	// ReleaseManifest is the release manifest the compat scan compares
	// replicas against (CUBE_TEMPLATE_CENTER_RELEASE_MANIFEST). Only the
	// one-click bundle ships it; a missing file is not an error.
	ReleaseManifest string `yaml:"release_manifest"`

	S3 S3 `yaml:"s3"`

	// Listen is the templatecenter HTTP address; MasterAddr is where status
	// callbacks go; RedisAddr, when set, holds live progress.
	Listen     string `yaml:"listen"`
	MasterAddr string `yaml:"master_addr"`
	RedisAddr  string `yaml:"redis_addr"`

	Reconcile Reconcile `yaml:"reconcile"`

	// Master holds cubemaster's own settings; it shares the token, the
	// Redis address and (by default) the database with the data plane.
	Master Master `yaml:"master"`

	CallbackToken           string `yaml:"-"`
	CallbackInsecureNoToken bool   `yaml:"callback_insecure_no_token"`

	Warnings []string `yaml:"-"`
}

// S3 holds the shared CUBE_S3_* settings; S3 is enabled only when endpoint,
// bucket and both keys are set.
type S3 struct {
	Endpoint     string `yaml:"endpoint"`
	Bucket       string `yaml:"bucket"`
	AccessKey    string `yaml:"-"`
	SecretKey    string `yaml:"-"`
	Region       string `yaml:"region"`
	UsePathStyle bool   `yaml:"use_path_style"`
	UseSSL       bool   `yaml:"use_ssl"`
	Prefix       string `yaml:"artifact_prefix"`
}

// Reconcile holds the data plane's reconciler settings
// (CUBE_TEMPLATE_CENTER_RECONCILE_*; Go durations).
type Reconcile struct {
	Disabled          bool          `yaml:"disabled"`
	Interval          time.Duration `yaml:"interval"`
	StaleAfter        time.Duration `yaml:"stale_after"`
	PendingStaleAfter time.Duration `yaml:"pending_stale_after"`
	PullingStaleAfter time.Duration `yaml:"pulling_stale_after"`
	RunningStaleAfter time.Duration `yaml:"running_stale_after"`
}

// Master holds the control plane's settings (cubemaster).
type Master struct {
	// Listen is the public API address (CUBE_MASTER_LISTEN).
	Listen string `yaml:"listen"`
	// DBDSN is the metadata store (CUBE_MASTER_DB_DSN). Both processes
	// share one database, so when unset it is the data plane's DBDSN
	// (CUBE_TEMPLATE_CENTER_DB_DSN); Load resolves it.
	DBDSN string `yaml:"db_dsn"`
	// TemplateCenterAddr is the data plane's base URL
	// (CUBE_TEMPLATE_CENTER_ADDR): build submits, artifact deletes, and the
	// proxied compat and download routes.
	TemplateCenterAddr string `yaml:"template_center_addr"`
	// Nodes is the static node list (CUBE_MASTER_NODES), in the form
	// "id=host:port[@instanceType],..."; adapters/nodedir parses it.
	Nodes string `yaml:"nodes"`
	// NodeProbeInterval is how often every node's gRPC health is probed
	// (CUBE_MASTER_NODE_PROBE_INTERVAL, a Go duration).
	NodeProbeInterval time.Duration `yaml:"node_probe_interval"`
	// DownloadBaseURL is the base URL nodes download artifacts from
	// (CUBE_MASTER_DOWNLOAD_BASE_URL): the master's own address, which
	// proxies the download route to the data plane. "" derives it from the
	// listen address.
	DownloadBaseURL string `yaml:"download_base_url"`
	// SweepInterval is how often the BUILT-job sweeper and the artifact GC
	// run (CUBE_MASTER_SWEEP_INTERVAL, a Go duration).
	SweepInterval time.Duration `yaml:"sweep_interval"`
	// EnvdHostDir holds the envd binary (<dir>/envd) injected into
	// templates that opt in (CUBE_MASTER_ENVD_HOST_DIR). Optional.
	EnvdHostDir string `yaml:"envd_host_dir"`
	// LocalArtifactDirs are the roots of legacy artifacts kept on the
	// master's own disk (CUBE_MASTER_LOCAL_ARTIFACT_DIR, comma-separated;
	// legacy CUBEMASTER_ROOTFS_ARTIFACT_STORE_DIR). Migrate reads and removes
	// an artifact's ext4_path only inside one of them. Optional.
	LocalArtifactDirs []string `yaml:"local_artifact_dirs"`
}

// DefaultReleaseManifest is where the one-click bundle installs its release
// manifest.
const DefaultReleaseManifest = "/usr/local/services/cubetoolbox/release-manifest.json"

// DefaultEnvdHostDir is where upstream installs the envd binary.
const DefaultEnvdHostDir = "/usr/local/share/cubesandbox-envd"

// Enabled reports whether S3 is fully configured.
func (s S3) Enabled() bool {
	return s.Endpoint != "" && s.Bucket != "" && s.AccessKey != "" && s.SecretKey != ""
}

// Defaults are used for anything neither the file nor the environment sets.
func Defaults() Config {
	return Config{
		DBDSN:               "sqlite:///var/lib/cubetemplatecenter/tc.db",
		ArtifactStoreDir:    "/data/CubeTemplateCenter/storage",
		WorkDir:             os.TempDir(),
		LayerCacheMaxBytes:  20 << 30,
		MaxConcurrentBuilds: 2,
		Builder:             "ext4stream",
		ReleaseManifest:     DefaultReleaseManifest,
		Listen:              ":8090",
		MasterAddr:          "http://localhost:8089",
		Reconcile: Reconcile{
			Interval: 10 * time.Minute, PendingStaleAfter: 10 * time.Minute,
			PullingStaleAfter: 30 * time.Minute, RunningStaleAfter: time.Hour,
		},
		S3: S3{Region: "us-east-1", UsePathStyle: true},
		Master: Master{
			Listen:             ":8089",
			TemplateCenterAddr: "http://127.0.0.1:8090",
			SweepInterval:      time.Minute,
			NodeProbeInterval:  10 * time.Second,
			EnvdHostDir:        DefaultEnvdHostDir,
		},
	}
}

// Env looks a variable up; os.LookupEnv in production, a map in tests.
type Env func(name string) (string, bool)

// Load reads the YAML file named by CUBE_TEMPLATE_CENTER_CONFIG_PATH (legacy
// CUBE_MASTER_CONFIG_PATH), if any, then the environment.
func Load(env Env) (Config, error) {
	if env == nil {
		env = os.LookupEnv
	}
	c := Defaults()
	r := reader{env: env}
	if p, ok := r.lookup("CUBE_TEMPLATE_CENTER_CONFIG_PATH", "CUBE_MASTER_CONFIG_PATH"); ok && p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			return c, fmt.Errorf("read config file %s: %w", p, err)
		}
		dec := yaml.NewDecoder(strings.NewReader(string(b)))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil && err.Error() != "EOF" {
			return c, fmt.Errorf("parse config file %s: %w", p, err)
		}
		c.ConfigPath = p
	}
	r.str(&c.DBDSN, "CUBE_TEMPLATE_CENTER_DB_DSN")
	r.str(&c.ArtifactStoreDir, "CUBE_TEMPLATE_CENTER_ARTIFACT_STORE_DIR", "CUBEMASTER_ROOTFS_ARTIFACT_STORE_DIR")
	r.str(&c.ArtifactStoreURL, "CUBE_TEMPLATE_CENTER_ARTIFACT_STORE_URL")
	r.str(&c.WorkDir, "CUBE_TEMPLATE_CENTER_ARTIFACT_WORK_DIR", "CUBEMASTER_ROOTFS_ARTIFACT_DIR")
	r.str(&c.LayerCacheDir, "CUBE_TEMPLATE_CENTER_LAYER_CACHE_DIR")
	r.int64(&c.LayerCacheMaxBytes, "CUBE_TEMPLATE_CENTER_LAYER_CACHE_MAX_BYTES")
	r.int(&c.MaxConcurrentBuilds, "CUBE_TEMPLATE_CENTER_MAX_CONCURRENT_BUILDS", "CUBE_TC_MAX_CONCURRENT_BUILDS")
	r.list(&c.InsecureRegistries, "CUBE_TEMPLATE_CENTER_INSECURE_REGISTRIES")
	r.bool(&c.AllowLocalLayouts, "CUBE_TEMPLATE_CENTER_ALLOW_LOCAL_LAYOUTS")
	r.bool(&c.RegistryAllowPrivate, "CUBE_TEMPLATE_CENTER_REGISTRY_ALLOW_PRIVATE")
	r.bool(&c.RegistryAllowLoopback, "CUBE_TEMPLATE_CENTER_REGISTRY_ALLOW_LOOPBACK")
	r.list(&c.TrustedRegistries, "CUBE_TEMPLATE_CENTER_TRUSTED_REGISTRIES")
	r.str(&c.Builder, "CUBE_TEMPLATE_CENTER_BUILDER")
	r.str(&c.PluginDir, "CUBE_TEMPLATE_CENTER_PLUGIN_DIR")
	r.int64(&c.HeadroomBytes, "CUBE_TEMPLATE_CENTER_HEADROOM_BYTES")
	r.int64(&c.HeadroomInodes, "CUBE_TEMPLATE_CENTER_HEADROOM_INODES")
	r.int64(&c.MaxImageBytes, "CUBE_TEMPLATE_CENTER_MAX_IMAGE_BYTES")
	r.str(&c.ReleaseManifest, "CUBE_TEMPLATE_CENTER_RELEASE_MANIFEST")
	r.str(&c.S3.Endpoint, "CUBE_S3_ENDPOINT")
	r.str(&c.S3.Bucket, "CUBE_S3_BUCKET")
	r.str(&c.S3.AccessKey, "CUBE_S3_ACCESS_KEY")
	r.str(&c.S3.SecretKey, "CUBE_S3_SECRET_KEY")
	r.str(&c.S3.Region, "CUBE_S3_REGION")
	r.bool(&c.S3.UsePathStyle, "CUBE_S3_USE_PATH_STYLE")
	r.bool(&c.S3.UseSSL, "CUBE_S3_USE_SSL")
	r.str(&c.S3.Prefix, "CUBE_S3_ARTIFACT_PREFIX")
	r.str(&c.Listen, "CUBE_TEMPLATE_CENTER_LISTEN")
	r.str(&c.MasterAddr, "CUBE_MASTER_ADDR", "CUBE_TEMPLATE_CENTER_MASTER_ENDPOINT", "CUBE_MASTER_ENDPOINT")
	r.str(&c.RedisAddr, "CUBE_TEMPLATE_CENTER_REDIS_ADDR")
	r.bool(&c.Reconcile.Disabled, "CUBE_TEMPLATE_CENTER_RECONCILE_DISABLED", "CUBE_TC_RECONCILE_DISABLED")
	r.duration(&c.Reconcile.Interval, "CUBE_TEMPLATE_CENTER_RECONCILE_INTERVAL", "CUBE_TC_RECONCILE_INTERVAL")
	r.duration(&c.Reconcile.StaleAfter, "CUBE_TEMPLATE_CENTER_RECONCILE_STALE_AFTER", "CUBE_TC_RECONCILE_STALE_AFTER")
	r.duration(&c.Reconcile.PendingStaleAfter, "CUBE_TEMPLATE_CENTER_RECONCILE_PENDING_STALE_AFTER", "CUBE_TC_RECONCILE_PENDING_STALE_AFTER")
	r.duration(&c.Reconcile.PullingStaleAfter, "CUBE_TEMPLATE_CENTER_RECONCILE_PULLING_STALE_AFTER", "CUBE_TC_RECONCILE_PULLING_STALE_AFTER")
	r.duration(&c.Reconcile.RunningStaleAfter, "CUBE_TEMPLATE_CENTER_RECONCILE_RUNNING_STALE_AFTER", "CUBE_TC_RECONCILE_RUNNING_STALE_AFTER")
	r.str(&c.CallbackToken, "CUBE_TEMPLATE_CALLBACK_TOKEN", "CUBE_TC_CALLBACK_TOKEN")
	r.bool(&c.CallbackInsecureNoToken, "CUBE_TEMPLATE_CALLBACK_INSECURE_NO_TOKEN")
	r.str(&c.Master.Listen, "CUBE_MASTER_LISTEN")
	r.str(&c.Master.DBDSN, "CUBE_MASTER_DB_DSN")
	r.str(&c.Master.TemplateCenterAddr, "CUBE_TEMPLATE_CENTER_ADDR")
	r.str(&c.Master.Nodes, "CUBE_MASTER_NODES")
	r.duration(&c.Master.NodeProbeInterval, "CUBE_MASTER_NODE_PROBE_INTERVAL")
	r.str(&c.Master.DownloadBaseURL, "CUBE_MASTER_DOWNLOAD_BASE_URL")
	r.duration(&c.Master.SweepInterval, "CUBE_MASTER_SWEEP_INTERVAL")
	r.str(&c.Master.EnvdHostDir, "CUBE_MASTER_ENVD_HOST_DIR")
	r.list(&c.Master.LocalArtifactDirs, "CUBE_MASTER_LOCAL_ARTIFACT_DIR")
	if v, ok := r.env("CUBEMASTER_ROOTFS_ARTIFACT_STORE_DIR"); ok && len(c.Master.LocalArtifactDirs) == 0 && strings.TrimSpace(v) != "" {
		// The legacy store dir is where old masters kept artifacts. The
		// data plane's setting above already warns about the legacy name.
		c.Master.LocalArtifactDirs = []string{strings.TrimSpace(v)}
	}
	if c.Master.DBDSN == "" {
		// One database for both processes (not a legacy fallback: no warning).
		c.Master.DBDSN = c.DBDSN
	}
	c.Warnings = r.warnings
	if r.err != nil {
		return c, r.err
	}
	return c, c.validate()
}

func (c Config) validate() error {
	if c.Master.SweepInterval <= 0 {
		return fmt.Errorf("CUBE_MASTER_SWEEP_INTERVAL: %s, must be positive", c.Master.SweepInterval)
	}
	if c.Master.NodeProbeInterval <= 0 {
		return fmt.Errorf("CUBE_MASTER_NODE_PROBE_INTERVAL: %s, must be positive", c.Master.NodeProbeInterval)
	}
	if c.MaxConcurrentBuilds < 1 {
		return fmt.Errorf("CUBE_TEMPLATE_CENTER_MAX_CONCURRENT_BUILDS: %d, must be at least 1", c.MaxConcurrentBuilds)
	}
	for _, v := range []struct {
		name string
		n    int64
	}{{"CUBE_TEMPLATE_CENTER_HEADROOM_BYTES", c.HeadroomBytes}, {"CUBE_TEMPLATE_CENTER_HEADROOM_INODES", c.HeadroomInodes},
		{"CUBE_TEMPLATE_CENTER_MAX_IMAGE_BYTES", c.MaxImageBytes}, {"CUBE_TEMPLATE_CENTER_LAYER_CACHE_MAX_BYTES", c.LayerCacheMaxBytes}} {
		if v.n < 0 {
			return fmt.Errorf("%s: %d, must not be negative", v.name, v.n)
		}
	}
	return nil
}

type reader struct {
	env      Env
	warnings []string
	err      error
}

// lookup returns the first set name; a legacy name (any after the first)
// adds a deprecation warning.
func (r *reader) lookup(name string, legacy ...string) (string, bool) {
	if v, ok := r.env(name); ok {
		for _, l := range legacy {
			if _, lok := r.env(l); lok {
				r.warnings = append(r.warnings, fmt.Sprintf("both %s and legacy %s are set; using %s", name, l, name))
			}
		}
		return v, true
	}
	for _, l := range legacy {
		if v, ok := r.env(l); ok {
			r.warnings = append(r.warnings, fmt.Sprintf("%s is deprecated; use %s", l, name))
			return v, true
		}
	}
	return "", false
}

func (r *reader) str(dst *string, name string, legacy ...string) {
	if v, ok := r.lookup(name, legacy...); ok {
		*dst = strings.TrimSpace(v)
	}
}

func (r *reader) list(dst *[]string, name string, legacy ...string) {
	if v, ok := r.lookup(name, legacy...); ok {
		*dst = nil
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				*dst = append(*dst, s)
			}
		}
	}
}

func (r *reader) int(dst *int, name string, legacy ...string) {
	var n int64 = int64(*dst)
	r.int64(&n, name, legacy...)
	*dst = int(n)
}

func (r *reader) int64(dst *int64, name string, legacy ...string) {
	v, ok := r.lookup(name, legacy...)
	if !ok || strings.TrimSpace(v) == "" {
		return
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		r.fail(fmt.Errorf("%s: %q is not an integer", name, v))
		return
	}
	*dst = n
}

func (r *reader) bool(dst *bool, name string, legacy ...string) {
	v, ok := r.lookup(name, legacy...)
	if !ok || strings.TrimSpace(v) == "" {
		return
	}
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		r.fail(fmt.Errorf("%s: %q is not a boolean", name, v))
		return
	}
	*dst = b
}

// duration reads a positive Go duration ("90s", "10m").
func (r *reader) duration(dst *time.Duration, name string, legacy ...string) {
	v, ok := r.lookup(name, legacy...)
	if !ok || strings.TrimSpace(v) == "" {
		return
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d <= 0 {
		r.fail(fmt.Errorf("%s: %q is not a positive Go duration", name, v))
		return
	}
	*dst = d
}

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}
