package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/cubesandbox/templatecenter/core"
)

// Config is what the apps read at start-up. Every field a user can set is
// listed in Settings (settings.go), which is also the source of
// docs/configuration.md; a field without a setting fails the tests.
type Config struct {
	ConfigPath string `yaml:"-"`

	// DBDSN selects the metadata store: sqlite://, mysql://, postgres://.
	DBDSN string `yaml:"db_dsn"`
	// ArtifactStoreDir is the local artifact directory (file:// store).
	ArtifactStoreDir string `yaml:"artifact_store_dir"`
	// ArtifactStoreURL overrides the store with a gocloud URL.
	ArtifactStoreURL string `yaml:"artifact_store_url"`
	// Chunks publishes artifacts as chunks too (adapters/chunkstore).
	Chunks bool `yaml:"chunks"`
	// ChunkGCInterval is how often unused chunks are collected (0: never);
	// ChunkGCGrace keeps those stored less than this before a collection.
	ChunkGCInterval time.Duration `yaml:"chunk_gc_interval"`
	ChunkGCGrace    time.Duration `yaml:"chunk_gc_grace"`
	// ArtifactFileMode is the permission of the local store's objects
	// (octal; directories get search where it grants read).
	ArtifactFileMode string `yaml:"artifact_file_mode"`
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
	// RegistryTimeout fails a registry connection that moves no byte for
	// this long, and bounds resolving a tag.
	RegistryTimeout time.Duration `yaml:"registry_timeout"`
	// BuildTimeout fails a build that runs longer than this, from
	// resolving the image to the published bytes.
	BuildTimeout time.Duration `yaml:"build_timeout"`
	// CubeCAFile is the CubeEgress root CA baked into images that want it
	// when the master sends none (an upstream master, which leaves it to
	// the template center's own copy).
	CubeCAFile string `yaml:"cube_ca_file"`
	// BuildLiveness is how long a build job may go without a heartbeat
	// before a data-plane replica or the master fails it (both read it:
	// CUBE_TEMPLATE_BUILD_LIVENESS_TIMEOUT); builds heartbeat every sixth
	// of it. A job whose data plane exited is failed at once.
	BuildLiveness time.Duration `yaml:"build_liveness_timeout"`
	// ProgressReportInterval is the least time between two status reports
	// of a build that only carry progress.
	ProgressReportInterval time.Duration `yaml:"progress_report_interval"`
	// ScrubInterval is how often every READY artifact is read back and
	// checked against its sha256 (0: never); ScrubRemote extends it to
	// S3 and GCS stores.
	ScrubInterval time.Duration `yaml:"scrub_interval"`
	ScrubRemote   bool          `yaml:"scrub_remote"`
	// Builder is "ext4stream" (the default, in process), "mkfs", or the
	// name of a builder plugin under PluginDir ("plugin:NAME").
	Builder   string `yaml:"builder"`
	PluginDir string `yaml:"plugin_dir"`
	// GzipDecoder decodes gzip layers: "auto" (igzip when installed),
	// "builtin", or the absolute path of an igzip-compatible program.
	GzipDecoder    string `yaml:"gzip_decoder"`
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

	// Log is the data plane's logging (the master has its own, Master.Log).
	Log Log `yaml:"log"`

	// HTTP bounds each service's HTTP listener.
	HTTP HTTPLimits `yaml:"http"`

	Reconcile Reconcile `yaml:"reconcile"`

	// Master holds cubemaster's own settings; it shares the token, the
	// Redis address and (by default) the database with the data plane.
	Master Master `yaml:"master"`

	CallbackToken           string `yaml:"-"`
	CallbackInsecureNoToken bool   `yaml:"callback_insecure_no_token"`

	// NodeIP is this host's routable address
	// (CUBE_TEMPLATE_CENTER_NODE_IP, else CUBE_SANDBOX_NODE_IP, as
	// upstream): logged as the data plane's identity, and the listen
	// address becomes it when none was chosen explicitly and the address
	// is this host's (TemplateCenterListen).
	NodeIP string `yaml:"node_ip"`
	// AutoMigrate applies schema migrations when a service starts
	// (CUBE_AUTO_MIGRATION, default true; false leaves the DDL to an
	// out-of-band migrate, as upstream).
	AutoMigrate bool `yaml:"auto_migration"`
	// UpstreamMaster says the master is upstream's CubeMaster
	// (CUBE_TEMPLATE_CENTER_UPSTREAM_MASTER): BUILT reports then carry the
	// ext4_path of a file store and a presigned artifact_url of an object
	// store, which upstream distributes itself. Leave it off with our
	// master, which mints download URLs when nodes ask.
	UpstreamMaster bool `yaml:"upstream_master"`
	// ArtifactStoreBackend is upstream's CUBE_ARTIFACT_STORE_BACKEND: "fs"
	// turns S3 off (S3.Off) even when it is fully configured; "" or "s3"
	// is upstream's default, S3 when fully configured.
	ArtifactStoreBackend string `yaml:"artifact_store_backend"`
	// Strict refuses unknown settings in the file instead of warning
	// (--strict-config, CUBE_TEMPLATE_CENTER_STRICT_CONFIG).
	Strict bool `yaml:"-"`

	// Warnings are deprecations and unknown variables found by Load.
	Warnings []string `yaml:"-"`
	// Sources says where each setting's value came from, by variable name:
	// "default", "file", "env" or "env (legacy NAME)". Settings absent from
	// the map kept their default.
	Sources map[string]string `yaml:"-"`

	// listenFromBind is the upstream http_bind the data plane's listen
	// address came from; listenExplicit that one was chosen explicitly.
	listenFromBind string
	listenExplicit bool
}

// RequestSettings shape the sandbox requests the master sends to nodes
// (upstream conf.yaml cubelet_conf, extra_conf and log.region).
type RequestSettings struct {
	// EnableExposedPort sends exposed ports: a request's com.exposed_ports
	// annotation, else ExposedPortList (CUBE_MASTER_ENABLE_EXPOSED_PORT,
	// CUBE_MASTER_EXPOSED_PORTS; upstream cubelet_conf
	// enable_exposed_port, exposed_port_list; default on with port 80, as
	// upstream ships).
	EnableExposedPort bool     `yaml:"enable_exposed_port"`
	ExposedPortList   []string `yaml:"exposed_port_list"`
	// BlkQos and FsQos are the cube.master.blk.qos / .fs.qos annotations;
	// the maps by instance type win (upstream extra_conf).
	BlkQos    string            `yaml:"blk_qos"`
	BlkQosMap map[string]string `yaml:"blk_qos_map"`
	FsQos     string            `yaml:"fs_qos"`
	FsQosMap  map[string]string `yaml:"fs_qos_map"`
	// Region fills cube.master.instance.region when a request has none
	// (CUBE_MASTER_REGION; upstream log.region).
	Region string `yaml:"region"`
	// HostMountPrefixes bound host-dir volume paths
	// (CUBE_MASTER_HOST_MOUNT_PREFIXES; default /data/shared/).
	HostMountPrefixes []string `yaml:"host_mount_prefixes"`
	// CreateImageTimeout bounds one CreateImage call
	// (CUBE_MASTER_CREATE_IMAGE_TIMEOUT, a Go duration; upstream
	// cubelet_conf create_image_timeout_insec; default 300s).
	CreateImageTimeout time.Duration `yaml:"create_image_timeout"`
}

// HTTPLimits bound what clients may hold of a service's HTTP listener
// (CUBE_TEMPLATE_HTTP_*): each service applies them to its own.
type HTTPLimits struct {
	// MaxConnections is the most connections the listener serves at once;
	// more wait in the kernel's backlog, so descriptors are never
	// exhausted by idle or slow clients.
	MaxConnections int `yaml:"max_connections"`
	// IdleTimeout closes a keep-alive connection that sends no next
	// request for this long.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
}

// Log holds a service's logging settings.
type Log struct {
	// Level is debug, info, warn or error.
	Level string `yaml:"level"`
	// Format is json or text.
	Format string `yaml:"format"`
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
	// Off turns S3 off even when it is fully configured: Load sets it from
	// upstream's CUBE_ARTIFACT_STORE_BACKEND=fs (the CUBE_S3_* settings are
	// then for the volume plugins only).
	Off bool `yaml:"-"`
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
	// NodeDownloadBaseURL replaces the base of the download URL sent to
	// every node (CUBE_MASTER_NODE_DOWNLOAD_BASE_URL): a node-local cache.
	NodeDownloadBaseURL string `yaml:"node_download_base_url"`
	// SweepInterval is how often the BUILT-job sweeper and the artifact GC
	// run (CUBE_MASTER_SWEEP_INTERVAL, a Go duration).
	SweepInterval time.Duration `yaml:"sweep_interval"`
	// Converge turns on convergence (CUBE_MASTER_CONVERGE): every sweep,
	// READY templates are distributed to healthy nodes of their scope that
	// lack a READY replica (a node back from an outage, a node added).
	Converge bool `yaml:"converge"`
	// ConvergeBackoff is how long convergence leaves a template alone after
	// its convergence job failed (CUBE_MASTER_CONVERGE_BACKOFF).
	ConvergeBackoff time.Duration `yaml:"converge_backoff"`
	// ConvergeAtOnce bounds the convergence jobs one sweep starts
	// (CUBE_MASTER_CONVERGE_AT_ONCE).
	ConvergeAtOnce int `yaml:"converge_at_once"`
	// PlacementPolicyFile is the placement policy's file
	// (CUBE_MASTER_PLACEMENT_POLICY_FILE): YAML or JSON, the policy's keys
	// or upstream's template_preheat block. "" places every template
	// everywhere until the API sets a policy.
	PlacementPolicyFile string `yaml:"placement_policy_file"`
	// PlacementInterval is how often the placement controller runs
	// (CUBE_MASTER_PLACEMENT_INTERVAL); 0 turns it off.
	PlacementInterval time.Duration `yaml:"placement_interval"`
	// PlacementAtOnce bounds the actions of one controller pass
	// (CUBE_MASTER_PLACEMENT_AT_ONCE).
	PlacementAtOnce int `yaml:"placement_at_once"`
	// DistributionWorkers bounds the node RPCs one job runs at once
	// (CUBE_MASTER_DISTRIBUTION_WORKERS).
	DistributionWorkers int `yaml:"distribution_workers"`
	// EnvdHostDir holds the envd binary (<dir>/envd) injected into
	// templates that opt in (CUBE_MASTER_ENVD_HOST_DIR). Optional.
	EnvdHostDir string `yaml:"envd_host_dir"`
	// LocalArtifactDirs are the roots of legacy artifacts kept on the
	// master's own disk (CUBE_MASTER_LOCAL_ARTIFACT_DIR, comma-separated;
	// legacy CUBEMASTER_ROOTFS_ARTIFACT_STORE_DIR). Migrate reads and removes
	// an artifact's ext4_path only inside one of them. Optional.
	LocalArtifactDirs []string `yaml:"local_artifact_dirs"`
	// Log is the master's logging.
	Log Log `yaml:"log"`
	// Request shapes the sandbox requests sent to nodes.
	Request RequestSettings `yaml:"request"`
	// CADir holds the CubeEgress root CA served on /cube/ca/{filename}
	// (CUBE_MASTER_CA_DIR, default /etc/cube/ca, upstream's path).
	CADir string `yaml:"ca_dir"`
	// Auth is the public API's authentication.
	Auth Auth `yaml:"auth"`
	// NodeToken is the credential sent to nodes on every call
	// (CUBE_MASTER_NODE_TOKEN, gRPC metadata x-cube-node-token); node
	// agents refuse calls without it, Cubelets ignore it.
	NodeToken string `yaml:"-"`
	// NodeTLS is TLS to the nodes (off unless a CA is set).
	NodeTLS NodeTLS `yaml:"node_tls"`
	// ReplicaCheckAtOnce bounds the READY replicas one sweep re-checks on
	// their nodes (CUBE_MASTER_REPLICA_CHECK_AT_ONCE; 0 turns it off).
	ReplicaCheckAtOnce int `yaml:"replica_check_at_once"`
	// SealingKeys seal the registry credentials kept for redo
	// (CUBE_MASTER_SEALING_KEYS: id:secret,...; the first seals, all
	// open), else the key file SealingKeyFile
	// (CUBE_MASTER_SEALING_KEY_FILE). Neither: credentials are not kept.
	SealingKeys    string `yaml:"-"`
	SealingKeyFile string `yaml:"sealing_key_file"`
}

// NodeTLS is TLS from the master to its nodes (CUBE_MASTER_NODE_TLS_*):
// CA verifies the nodes' certificates; Cert and Key are the master's client
// certificate, for node agents that require one.
type NodeTLS struct {
	CA   string `yaml:"ca"`
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// Auth is the public /cube/* API's authentication (CUBE_MASTER_AUTH*;
// upstream conf.yaml auth). On by default: `cubemaster serve` refuses to
// start with it on and no credential; `cubemaster dev` turns it off.
type Auth struct {
	// Enabled guards the public routes (CUBE_MASTER_AUTH; upstream
	// auth.enable).
	Enabled bool `yaml:"enabled"`
	// Expiry bounds how far a signed request's cube_timestamp may be from
	// now (CUBE_MASTER_AUTH_EXPIRY; upstream
	// auth.signature_expire_time_insec, default 120s).
	Expiry time.Duration `yaml:"expiry"`
	// SecretKeys are the signing keys by cube_user_id
	// (CUBE_MASTER_AUTH_SECRET_KEYS, user=secret,...; upstream
	// auth.secret_key_map, whose groups are merged).
	SecretKeys UserSecrets `yaml:"-"`
	// BearerTokens are accepted in Authorization: Bearer
	// (CUBE_MASTER_AUTH_BEARER_TOKENS, comma-separated).
	BearerTokens []string `yaml:"-"`
}

// UserSecrets maps user ids to secrets. In the environment it is
// user=secret pairs, comma-separated (or a JSON object of strings).
type UserSecrets map[string]string

// DefaultReleaseManifest is where the one-click bundle installs its release
// manifest.
const DefaultReleaseManifest = "/usr/local/services/cubetoolbox/release-manifest.json"

// DefaultEnvdHostDir is where upstream installs the envd binary.
const DefaultEnvdHostDir = "/usr/local/share/cubesandbox-envd"

// Enabled reports whether S3 is fully configured and not turned off.
func (s S3) Enabled() bool {
	return !s.Off && s.Endpoint != "" && s.Bucket != "" && s.AccessKey != "" && s.SecretKey != ""
}

// Defaults are used for anything neither the file nor the environment sets.
// Paths are under the user's state directory (see UserDirs), so
// a service and a one-shot build run by different users never share a
// directory one of them cannot write.
func Defaults() Config { return DefaultsFor(UserDirs()) }

// DefaultsFor is Defaults for the given directories (docs use placeholders).
func DefaultsFor(d Dirs) Config {
	return Config{
		DBDSN:                  "sqlite://" + d.State + "/tc.db",
		ArtifactStoreDir:       d.State + "/artifacts",
		WorkDir:                d.State + "/work",
		LayerCacheMaxBytes:     20 << 30,
		Chunks:                 true,
		ChunkGCInterval:        time.Hour,
		ChunkGCGrace:           10 * time.Minute,
		MaxConcurrentBuilds:    2,
		RegistryTimeout:        60 * time.Second,
		BuildTimeout:           2 * time.Hour,
		BuildLiveness:          90 * time.Second,
		CubeCAFile:             core.CubeCAPath,
		ProgressReportInterval: time.Second,
		ScrubInterval:          7 * 24 * time.Hour,
		Builder:                "ext4stream",
		GzipDecoder:            "auto",
		ReleaseManifest:        DefaultReleaseManifest,
		Listen:                 "127.0.0.1:8090",
		MasterAddr:             "http://127.0.0.1:8089",
		Log:                    Log{Level: "info", Format: "json"},
		HTTP:                   HTTPLimits{MaxConnections: 2048, IdleTimeout: 60 * time.Second},
		ArtifactFileMode:       "0640",
		Reconcile: Reconcile{
			Interval: 10 * time.Minute, PendingStaleAfter: 10 * time.Minute,
			PullingStaleAfter: 30 * time.Minute, RunningStaleAfter: time.Hour,
		},
		S3:          S3{Region: "us-east-1", UsePathStyle: true},
		AutoMigrate: true,
		Master: Master{
			Listen:              "127.0.0.1:8089",
			TemplateCenterAddr:  "http://127.0.0.1:8090",
			SweepInterval:       time.Minute,
			NodeProbeInterval:   10 * time.Second,
			Converge:            true,
			ConvergeBackoff:     10 * time.Minute,
			ConvergeAtOnce:      4,
			PlacementInterval:   5 * time.Minute,
			PlacementAtOnce:     8,
			DistributionWorkers: 16,
			EnvdHostDir:         DefaultEnvdHostDir,
			Log:                 Log{Level: "info", Format: "json"},
			Request: RequestSettings{
				EnableExposedPort: true, ExposedPortList: []string{"80"},
				HostMountPrefixes: []string{"/data/shared/"}, CreateImageTimeout: 300 * time.Second,
			},
			CADir:              core.CubeCADir,
			Auth:               Auth{Enabled: true, Expiry: 120 * time.Second},
			ReplicaCheckAtOnce: 32,
		},
	}
}

// Env looks a variable up; os.LookupEnv in production, a map in tests.
type Env func(name string) (string, bool)

// Load reads the YAML file named by CUBE_TEMPLATE_CENTER_CONFIG_PATH (legacy
// CUBE_MASTER_CONFIG_PATH), if any, then the environment. The file may be
// ours, upstream's conf.yaml (common.http_bind/http_port,
// common.template_center_addr, common.master_addr, instance_db_config,
// cubelet_conf, extra_conf, log.region; see upstream.go) or both; our own
// keys win over upstream's, the environment over both. Unknown keys are
// warned about by name, or refused with CUBE_TEMPLATE_CENTER_STRICT_CONFIG
// (--strict-config). With a nil env it reads the process environment and
// also warns about unknown CUBE_TEMPLATE_CENTER_* / CUBE_MASTER_*
// variables.
func Load(env Env) (Config, error) {
	var environ []string
	if env == nil {
		env = os.LookupEnv
		environ = os.Environ()
	}
	return LoadFrom(env, environ)
}

// LoadFrom is Load with the variable names to check for typos given
// explicitly (environ holds NAME=value entries, as os.Environ).
func LoadFrom(env Env, environ []string) (Config, error) {
	c := Defaults()
	c.Sources = map[string]string{}
	r := reader{env: env, sources: c.Sources}
	// Read before the file, which they name or govern.
	for _, s := range Settings() {
		if s.Env == StrictVariable {
			r.apply(&c, s)
		}
	}
	if p, ok := r.lookup(PathVariable, LegacyPathVariable); ok && p != "" {
		if err := c.loadFile(p, &r); err != nil {
			return c, err
		}
		c.ConfigPath = p
	}
	for _, s := range Settings() {
		if s.Env != PathVariable && s.Env != StrictVariable {
			r.apply(&c, s)
		}
	}
	if _, ok := r.env("CUBE_TEMPLATE_CENTER_LISTEN"); ok {
		c.listenExplicit = true
	}
	if v, ok := r.env(legacyStoreDir); ok && len(c.Master.LocalArtifactDirs) == 0 && strings.TrimSpace(v) != "" {
		// The legacy store dir is where old masters kept artifacts. The
		// data plane's setting already warns about the legacy name.
		c.Master.LocalArtifactDirs = []string{strings.TrimSpace(v)}
		c.Sources["CUBE_MASTER_LOCAL_ARTIFACT_DIR"] = "env (legacy " + legacyStoreDir + ")"
	}
	r.readUpstreamEnv(&c)
	if c.Master.DBDSN == "" {
		// One database for both processes (not a legacy fallback: no warning).
		c.Master.DBDSN = c.DBDSN
		if src, ok := c.Sources["CUBE_TEMPLATE_CENTER_DB_DSN"]; ok {
			c.Sources["CUBE_MASTER_DB_DSN"] = src + " (CUBE_TEMPLATE_CENTER_DB_DSN)"
		}
	}
	r.warnings = append(r.warnings, UnknownVariables(environ)...)
	c.Warnings = r.warnings
	if r.err != nil {
		return c, r.err
	}
	return c, c.validate()
}

// The config file's variable and its pre-rename spelling, and the switch
// that makes unknown keys in it an error.
const (
	PathVariable       = "CUBE_TEMPLATE_CENTER_CONFIG_PATH"
	LegacyPathVariable = "CUBE_MASTER_CONFIG_PATH"
	StrictVariable     = "CUBE_TEMPLATE_CENTER_STRICT_CONFIG"
	legacyStoreDir     = "CUBEMASTER_ROOTFS_ARTIFACT_STORE_DIR"
)

// markFileSources records "file" for every setting whose YAML key the file
// sets.
func markFileSources(c *Config, b []byte) {
	var tree map[string]any
	if yaml.Unmarshal(b, &tree) != nil {
		return
	}
	for _, s := range Settings() {
		if s.YAML == "" {
			continue
		}
		node := any(tree)
		for _, part := range strings.Split(s.YAML, ".") {
			m, ok := node.(map[string]any)
			if !ok {
				node = nil
				break
			}
			node, ok = m[part]
			if !ok {
				node = nil
				break
			}
		}
		if node != nil {
			c.Sources[s.Env] = "file"
		}
	}
}

func (c Config) validate() error {
	if c.Master.SweepInterval <= 0 {
		return fmt.Errorf("CUBE_MASTER_SWEEP_INTERVAL: %s, must be positive", c.Master.SweepInterval)
	}
	if c.Master.ConvergeBackoff <= 0 {
		return fmt.Errorf("CUBE_MASTER_CONVERGE_BACKOFF: %s, must be positive", c.Master.ConvergeBackoff)
	}
	if c.Master.PlacementAtOnce <= 0 {
		return fmt.Errorf("CUBE_MASTER_PLACEMENT_AT_ONCE: %d, must be positive", c.Master.PlacementAtOnce)
	}
	if c.Master.ConvergeAtOnce <= 0 {
		return fmt.Errorf("CUBE_MASTER_CONVERGE_AT_ONCE: %d, must be positive", c.Master.ConvergeAtOnce)
	}
	if c.Master.ReplicaCheckAtOnce < 0 {
		return fmt.Errorf("CUBE_MASTER_REPLICA_CHECK_AT_ONCE: %d, must be 0 (off) or positive", c.Master.ReplicaCheckAtOnce)
	}
	if c.Master.DistributionWorkers <= 0 {
		return fmt.Errorf("CUBE_MASTER_DISTRIBUTION_WORKERS: %d, must be positive", c.Master.DistributionWorkers)
	}
	if c.Master.Auth.Expiry <= 0 {
		return fmt.Errorf("CUBE_MASTER_AUTH_EXPIRY: %s, must be positive", c.Master.Auth.Expiry)
	}
	if c.Master.NodeProbeInterval <= 0 {
		return fmt.Errorf("CUBE_MASTER_NODE_PROBE_INTERVAL: %s, must be positive", c.Master.NodeProbeInterval)
	}
	if c.HTTP.MaxConnections < 1 {
		return fmt.Errorf("CUBE_TEMPLATE_HTTP_MAX_CONNECTIONS: %d, must be at least 1", c.HTTP.MaxConnections)
	}
	if c.HTTP.IdleTimeout <= 0 {
		return fmt.Errorf("CUBE_TEMPLATE_HTTP_IDLE_TIMEOUT: %s, must be positive", c.HTTP.IdleTimeout)
	}
	if c.MaxConcurrentBuilds < 1 {
		return fmt.Errorf("CUBE_TEMPLATE_CENTER_MAX_CONCURRENT_BUILDS: %d, must be at least 1", c.MaxConcurrentBuilds)
	}
	if c.ChunkGCInterval < 0 || c.ChunkGCGrace < 0 {
		return fmt.Errorf("CUBE_TEMPLATE_CENTER_CHUNK_GC_INTERVAL and _GRACE: %s and %s, must be 0 (off) or positive", c.ChunkGCInterval, c.ChunkGCGrace)
	}
	if c.ScrubInterval < 0 {
		return fmt.Errorf("CUBE_TEMPLATE_CENTER_SCRUB_INTERVAL: %s, must be 0 (off) or positive", c.ScrubInterval)
	}
	if c.BuildTimeout <= 0 {
		return fmt.Errorf("CUBE_TEMPLATE_CENTER_BUILD_TIMEOUT: %s, must be positive", c.BuildTimeout)
	}
	if c.BuildLiveness < time.Second {
		return fmt.Errorf("CUBE_TEMPLATE_BUILD_LIVENESS_TIMEOUT: %s, must be at least 1s (the default is 90s)", c.BuildLiveness)
	}
	if c.ProgressReportInterval <= 0 {
		return fmt.Errorf("CUBE_TEMPLATE_CENTER_PROGRESS_REPORT_INTERVAL: %s, must be positive", c.ProgressReportInterval)
	}
	if c.RegistryTimeout <= 0 {
		return fmt.Errorf("CUBE_TEMPLATE_CENTER_REGISTRY_TIMEOUT: %s, must be positive", c.RegistryTimeout)
	}
	switch d := c.GzipDecoder; {
	case d == "auto", d == "builtin", filepath.IsAbs(d):
	default:
		return fmt.Errorf("CUBE_TEMPLATE_CENTER_GZIP_DECODER: %q, want auto, builtin or the absolute path of igzip", d)
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
	if err := c.Log.Check("CUBE_TEMPLATE_CENTER_LOG_LEVEL", "CUBE_TEMPLATE_CENTER_LOG_FORMAT"); err != nil {
		return err
	}
	return c.Master.Log.Check("CUBE_MASTER_LOG_LEVEL", "CUBE_MASTER_LOG_FORMAT")
}

// Check validates the level and format; errors name the setting
// (levelName, formatName: a variable or a flag).
func (l Log) Check(levelName, formatName string) error {
	switch strings.ToLower(l.Level) {
	case "debug", "info", "warn", "warning", "error":
	default:
		return fmt.Errorf("%s: %q, want debug, info, warn or error", levelName, l.Level)
	}
	switch strings.ToLower(l.Format) {
	case "json", "text":
	default:
		return fmt.Errorf("%s: %q, want json or text", formatName, l.Format)
	}
	return nil
}

// DatabaseSetting names, for a service's errors, the variable its database
// came from (service is DataPlane or ControlPlane): the master reads
// CUBE_TEMPLATE_CENTER_DB_DSN when its own CUBE_MASTER_DB_DSN is unset,
// and an error must name what the operator actually set.
func (c Config) DatabaseSetting(service string) string {
	const tc, m = "CUBE_TEMPLATE_CENTER_DB_DSN", "CUBE_MASTER_DB_DSN"
	_, tcSet := c.Sources[tc]
	src, mSet := c.Sources[m]
	switch {
	case service == DataPlane && tcSet:
		return tc
	case service == DataPlane:
		return tc + " (unset, so the default SQLite file)"
	case mSet && !strings.HasSuffix(src, "("+tc+")"):
		return m
	case tcSet:
		return tc + " (the master's database while " + m + " is unset)"
	}
	return m + " and " + tc + " (both unset, so the default SQLite file)"
}

// CheckSharedDatabase refuses a data plane whose CUBE_TEMPLATE_CENTER_DB_DSN
// is unset while CUBE_MASTER_DB_DSN is set: the data plane does not read the
// master's variable, so it would build into its own SQLite file, which the
// master never sees.
func (c Config) CheckSharedDatabase(service string) error {
	if service != DataPlane {
		return nil
	}
	_, tcSet := c.Sources["CUBE_TEMPLATE_CENTER_DB_DSN"]
	src, mSet := c.Sources["CUBE_MASTER_DB_DSN"]
	if tcSet || !mSet || strings.HasSuffix(src, "(CUBE_TEMPLATE_CENTER_DB_DSN)") {
		return nil
	}
	return fmt.Errorf("CUBE_TEMPLATE_CENTER_DB_DSN is not set for templatecenter, which does not read CUBE_MASTER_DB_DSN (the master's): " +
		"set CUBE_TEMPLATE_CENTER_DB_DSN to the database both services share (the master reads it too when CUBE_MASTER_DB_DSN is unset)")
}
