package config

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Services a setting applies to.
const (
	DataPlane    = "templatecenter"
	ControlPlane = "cubemaster"
	Both         = "both"
)

// Setting is one configuration variable: its environment name, its other
// current spellings (upstream's, read without a warning), its pre-rename
// spellings (read with a deprecation warning), its key in the YAML file,
// the keys of upstream's conf.yaml that also fill it, what it means and
// which service reads it. Field returns a pointer into a Config (a
// *string, *[]string, *map[string]string, *int, *int64, *bool or
// *time.Duration), which is how Load sets it and how the reference finds
// its default.
type Setting struct {
	Env string
	// Aliases are read after Env, in order, before Legacy: an empty value
	// counts as unset, and when several are set with different values the
	// first wins and a warning names the one ignored.
	Aliases []string
	Legacy  []string
	YAML    string // dotted key; "" for secrets, which only the environment sets
	// Upstream are the keys of upstream's conf.yaml that fill the setting
	// when the file does not set YAML (see upstream.go).
	Upstream []string
	Doc      string
	Service  string
	Secret   bool
	// ZeroOff says 0 is a valid duration that turns the feature off (every
	// other duration setting must be positive).
	ZeroOff bool
	// Default, when set, is what the reference shows instead of the
	// default value (for defaults derived from another setting).
	Default string
	Field   func(*Config) any
}

// Settings is every configuration variable, in the order the reference
// lists them. Adding a field to Config without adding it here fails
// TestEverySettingIsDocumented.
func Settings() []Setting {
	return []Setting{
		{Env: PathVariable, Legacy: []string{LegacyPathVariable}, Service: Both, Default: "none",
			Doc: "YAML file read before the environment (the environment wins). Keys are the YAML column; upstream's conf.yaml keys " +
				"(the upstream column) are read too, ours winning over them. Unknown keys are warned about by name.",
			Field: func(c *Config) any { return &c.ConfigPath }},
		{Env: StrictVariable, Service: Both,
			Doc:   "`true` refuses unknown keys in the config file instead of warning about them (upstream sections' unused keys are only listed). `--strict-config` on either service sets it.",
			Field: func(c *Config) any { return &c.Strict }},
		{Env: "CUBE_TEMPLATE_CENTER_DB_DSN", YAML: "db_dsn", Upstream: []string{"instance_db_config"}, Service: Both,
			Doc:   "Metadata store: `sqlite:///path/tc.db` (the directory is created), `mysql://user:pass@tcp(host:3306)/db` (or `mariadb://`, the same) or `postgres://user:pass@host:5432/db`. Both services share one database. In a shell or an env file a shell reads, quote it: `CUBE_TEMPLATE_CENTER_DB_DSN='mysql://u:p@tcp(db:3306)/cube'` (the parentheses are shell syntax).",
			Field: func(c *Config) any { return &c.DBDSN }},
		{Env: "CUBE_MASTER_DB_DSN", YAML: "master.db_dsn", Service: ControlPlane, Default: "CUBE_TEMPLATE_CENTER_DB_DSN",
			Doc:   "The master's metadata store; unset means CUBE_TEMPLATE_CENTER_DB_DSN. The data plane does not read it: templatecenter refuses to start when it is set and CUBE_TEMPLATE_CENTER_DB_DSN is not.",
			Field: func(c *Config) any { return &c.Master.DBDSN }},
		{Env: "CUBE_TEMPLATE_CENTER_LISTEN", YAML: "listen", Upstream: []string{"common.http_bind", "common.http_port"}, Service: DataPlane,
			Doc:   "Data plane HTTP address (internal API, downloads, /health, /ready, /metrics). Loopback by default: only the master and nodes need it; `serve --listen` wins.",
			Field: func(c *Config) any { return &c.Listen }},
		{Env: "CUBE_TEMPLATE_CENTER_NODE_IP", Aliases: []string{"CUBE_SANDBOX_NODE_IP"}, YAML: "node_ip", Service: DataPlane,
			Doc: "This host's routable address (upstream's installer sets CUBE_SANDBOX_NODE_IP on every unit), logged as the data plane's identity. " +
				"When no listen address was chosen (no CUBE_TEMPLATE_CENTER_LISTEN, `listen`, `--listen`, or an `http_bind` other than 0.0.0.0 or ::) and the IP is on this host, the data plane listens on it, as upstream's ResolveHTTPBind.",
			Field: func(c *Config) any { return &c.NodeIP }},
		{Env: "CUBE_MASTER_ADDR", Legacy: []string{"CUBE_TEMPLATE_CENTER_MASTER_ENDPOINT", "CUBE_MASTER_ENDPOINT"}, YAML: "master_addr", Upstream: []string{"common.master_addr"}, Service: DataPlane,
			Doc:   "Where the data plane sends status callbacks: the master's base URL.",
			Field: func(c *Config) any { return &c.MasterAddr }},
		{Env: "CUBE_TEMPLATE_CENTER_UPSTREAM_MASTER", YAML: "upstream_master", Service: DataPlane,
			Doc:   "`true` when the master is upstream's CubeMaster: BUILT reports then carry the `ext4_path` of a file store (which must be the master's own artifact directory) and a presigned `artifact_url` of an object store. Leave it off with our master.",
			Field: func(c *Config) any { return &c.UpstreamMaster }},
		{Env: "CUBE_TEMPLATE_CALLBACK_TOKEN", Legacy: []string{"CUBE_TC_CALLBACK_TOKEN"}, Service: Both, Secret: true,
			Doc:   "Shared secret of the internal routes (build submits, status callbacks). Required, the same on both services: `openssl rand -hex 32`.",
			Field: func(c *Config) any { return &c.CallbackToken }},
		{Env: "CUBE_TEMPLATE_CALLBACK_INSECURE_NO_TOKEN", YAML: "callback_insecure_no_token", Service: Both,
			Doc:   "`true` lets a service start without a token, leaving the internal routes open. Never in production.",
			Field: func(c *Config) any { return &c.CallbackInsecureNoToken }},
		{Env: "CUBE_TEMPLATE_HTTP_MAX_CONNECTIONS", YAML: "http.max_connections", Service: Both,
			Doc: "Most connections each service's HTTP listener serves at once; more wait to be accepted. Bounds the descriptors idle or slow clients can take " +
				"(every node downloading at once counts, on the master's listener and the data plane's).",
			Field: func(c *Config) any { return &c.HTTP.MaxConnections }},
		{Env: "CUBE_TEMPLATE_HTTP_IDLE_TIMEOUT", YAML: "http.idle_timeout", Service: Both,
			Doc:   "A keep-alive connection that sends no next request for this long is closed (upstream kept them 360 s). A Go duration.",
			Field: func(c *Config) any { return &c.HTTP.IdleTimeout }},
		{Env: "CUBE_AUTO_MIGRATION", YAML: "auto_migration", Service: Both,
			Doc:   "`false` skips the schema migrations at start-up, leaving them to `templatecenter migrate` / `cubemaster migrate` run out of band (as upstream).",
			Field: func(c *Config) any { return &c.AutoMigrate }},
		{Env: "CUBE_TEMPLATE_CENTER_REDIS_ADDR", YAML: "redis_addr", Service: Both,
			Doc:   "Redis `host:port` for live build progress shared between processes; unset keeps it in memory (one data plane and master in one process, or no live pull counters across processes).",
			Field: func(c *Config) any { return &c.RedisAddr }},
		{Env: "CUBE_TEMPLATE_CENTER_LOG_LEVEL", YAML: "log.level", Service: DataPlane,
			Doc:   "Data plane log level: debug, info, warn or error; `--log-level` wins.",
			Field: func(c *Config) any { return &c.Log.Level }},
		{Env: "CUBE_TEMPLATE_CENTER_LOG_FORMAT", YAML: "log.format", Service: DataPlane,
			Doc:   "Data plane log format: json or text; `--log-format` wins.",
			Field: func(c *Config) any { return &c.Log.Format }},

		{Env: "CUBE_TEMPLATE_CENTER_ARTIFACT_STORE_DIR", Aliases: []string{"CUBE_ARTIFACT_STORE_FS_ROOT"}, Legacy: []string{legacyStoreDir}, YAML: "artifact_store_dir", Service: DataPlane,
			Doc:   "Directory of the local (`file://`) artifact store, used unless CUBE_TEMPLATE_CENTER_ARTIFACT_STORE_URL or S3 is set. Upstream's CUBE_ARTIFACT_STORE_FS_ROOT names it after ours and before the legacy name.",
			Field: func(c *Config) any { return &c.ArtifactStoreDir }},
		{Env: "CUBE_TEMPLATE_CENTER_ARTIFACT_STORE_URL", YAML: "artifact_store_url", Service: DataPlane,
			Doc:   "Artifact store as a gocloud URL (`file:///dir[?create_dir=true][&file_mode=0640]`, `s3://bucket?region=...`, `gs://bucket`, `mem://`); overrides the directory and CUBE_S3_*.",
			Field: func(c *Config) any { return &c.ArtifactStoreURL }},
		{Env: "CUBE_TEMPLATE_CENTER_CHUNKS", YAML: "chunks", Service: DataPlane,
			Doc:   "Also publish every artifact as content-defined chunks and an index in the artifact store (under `_chunks/`, each chunk once), so that nodes fetch only the chunks they lack; the whole file and its download stay. Costs a second copy of new chunks in the store; chunks no artifact uses any more are collected (CUBE_TEMPLATE_CENTER_CHUNK_GC_INTERVAL).",
			Field: func(c *Config) any { return &c.Chunks }},
		{Env: "CUBE_TEMPLATE_CENTER_CHUNK_GC_INTERVAL", YAML: "chunk_gc_interval", Service: DataPlane, ZeroOff: true,
			Doc:   "How often the chunks no artifact's index names any more are deleted from the store; a collection also runs when the data plane starts and soon after an artifact is deleted, one at a time across replicas. `0` turns it off (unused chunks then stay). A Go duration.",
			Field: func(c *Config) any { return &c.ChunkGCInterval }},
		{Env: "CUBE_TEMPLATE_CENTER_CHUNK_GC_GRACE", YAML: "chunk_gc_grace", Service: DataPlane, ZeroOff: true,
			Doc:   "Unused chunks stored less than this before a collection starts are kept for the next one: those of publishes in flight, which a collection would otherwise make them store again (safe either way). `0` turns it off. A Go duration.",
			Field: func(c *Config) any { return &c.ChunkGCGrace }},
		{Env: "CUBE_TEMPLATE_CENTER_ARTIFACT_FILE_MODE", YAML: "artifact_file_mode", Service: DataPlane,
			Doc: "Permission of the local artifact store's files, in octal; its directories get search where it grants read (0640 gives 0750). " +
				"Never readable by everyone by default: an image can hold secrets. A Cubelet or upstream master that reads the files as another user needs the group, or `0644`. " +
				"Applied to existing files when the store opens; a `file://` store URL's `file_mode` parameter wins.",
			Field: func(c *Config) any { return &c.ArtifactFileMode }},
		{Env: "CUBE_ARTIFACT_STORE_BACKEND", YAML: "artifact_store_backend", Service: Both,
			Doc:   "Upstream's store switch: `fs` turns S3 off even when CUBE_S3_* are all set (they are then the volume plugins'); empty or `s3` is S3 when fully configured. Another value is read as `s3`, with a warning.",
			Field: func(c *Config) any { return &c.ArtifactStoreBackend }},
		{Env: "CUBE_TEMPLATE_CENTER_ARTIFACT_WORK_DIR", Legacy: []string{"CUBEMASTER_ROOTFS_ARTIFACT_DIR"}, YAML: "artifact_work_dir", Service: DataPlane,
			Doc:   "Build scratch space (one directory per build, removed after it).",
			Field: func(c *Config) any { return &c.WorkDir }},
		{Env: "CUBE_TEMPLATE_CENTER_LAYER_CACHE_DIR", YAML: "layer_cache_dir", Service: DataPlane, Default: "<CUBE_TEMPLATE_CENTER_ARTIFACT_WORK_DIR>/layer-cache",
			Doc:   "Verified, content-addressed cache of image layers shared by builds.",
			Field: func(c *Config) any { return &c.LayerCacheDir }},
		{Env: "CUBE_TEMPLATE_CENTER_LAYER_CACHE_MAX_BYTES", YAML: "layer_cache_max_bytes", Service: DataPlane,
			Doc:   "Size bound of the layer cache in bytes (least recently used layers go first).",
			Field: func(c *Config) any { return &c.LayerCacheMaxBytes }},
		{Env: "CUBE_TEMPLATE_CENTER_MAX_CONCURRENT_BUILDS", Legacy: []string{"CUBE_TC_MAX_CONCURRENT_BUILDS"}, YAML: "max_concurrent_builds", Service: DataPlane,
			Doc:   "Builds run at once; more are refused as busy (130429).",
			Field: func(c *Config) any { return &c.MaxConcurrentBuilds }},
		{Env: "CUBE_TEMPLATE_CENTER_BUILDER", YAML: "builder", Service: DataPlane,
			Doc:   "`ext4stream` (pure Go, in process: no root, no e2fsprogs), `mkfs` (e2fsprogs, needs root), or `plugin:NAME` for the builder plugin binary NAME in CUBE_TEMPLATE_CENTER_PLUGIN_DIR (`plugin:ext4stream` runs the same writer out of process).",
			Field: func(c *Config) any { return &c.Builder }},
		{Env: "CUBE_TEMPLATE_CENTER_GZIP_DECODER", YAML: "gzip_decoder", Service: DataPlane,
			Doc:   "Decoder of gzip layers: `auto` runs ISA-L's `igzip` (Debian package `isal`) in a child process, as nobody, when it is on PATH, else the built-in Go decoder; `builtin` always uses the built-in one; an absolute path names the igzip binary (a build then fails to start if it is missing). igzip inflates about twice as fast; the tree is the same.",
			Field: func(c *Config) any { return &c.GzipDecoder }},
		{Env: "CUBE_TEMPLATE_CENTER_PLUGIN_DIR", YAML: "plugin_dir", Service: DataPlane,
			Doc:   "Directory of builder plugin binaries; unset means the directory of the templatecenter executable.",
			Field: func(c *Config) any { return &c.PluginDir }},
		{Env: "CUBE_TEMPLATE_CENTER_HEADROOM_BYTES", YAML: "headroom_bytes", Service: DataPlane,
			Doc:   "Free space added to an ext4 beyond its content, in bytes.",
			Field: func(c *Config) any { return &c.HeadroomBytes }},
		{Env: "CUBE_TEMPLATE_CENTER_HEADROOM_INODES", YAML: "headroom_inodes", Service: DataPlane,
			Doc:   "Free inodes added to an ext4 beyond its content.",
			Field: func(c *Config) any { return &c.HeadroomInodes }},
		{Env: "CUBE_TEMPLATE_CENTER_MAX_IMAGE_BYTES", YAML: "max_image_bytes", Service: DataPlane,
			Doc:   "Largest ext4 a build may produce, in bytes; 0 is the builder's own limit.",
			Field: func(c *Config) any { return &c.MaxImageBytes }},
		{Env: "CUBE_TEMPLATE_CENTER_RELEASE_MANIFEST", YAML: "release_manifest", Service: DataPlane,
			Doc:   "Release manifest the compat scan compares replicas against; a missing file is not an error.",
			Field: func(c *Config) any { return &c.ReleaseManifest }},

		{Env: "CUBE_TEMPLATE_CENTER_INSECURE_REGISTRIES", YAML: "insecure_registries", Service: DataPlane,
			Doc:   "Comma-separated registry `host[:port]`s spoken to over plain HTTP; they are also allowed to be on loopback or private addresses. `--insecure-registry` adds to it.",
			Field: func(c *Config) any { return &c.InsecureRegistries }},
		{Env: "CUBE_TEMPLATE_CENTER_TRUSTED_REGISTRIES", YAML: "trusted_registries", Service: DataPlane,
			Doc:   "Comma-separated registry `host[:port]`s (HTTPS) allowed to resolve to loopback or private addresses. `--allow-registry` adds to it.",
			Field: func(c *Config) any { return &c.TrustedRegistries }},
		{Env: "CUBE_TEMPLATE_CENTER_REGISTRY_ALLOW_LOOPBACK", YAML: "registry_allow_loopback", Service: DataPlane,
			Doc:   "`true` allows every registry on loopback addresses. Link-local and cloud metadata addresses are refused whatever is set.",
			Field: func(c *Config) any { return &c.RegistryAllowLoopback }},
		{Env: "CUBE_TEMPLATE_CENTER_REGISTRY_ALLOW_PRIVATE", YAML: "registry_allow_private", Service: DataPlane,
			Doc:   "`true` allows every registry on private addresses (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7).",
			Field: func(c *Config) any { return &c.RegistryAllowPrivate }},
		{Env: "CUBE_TEMPLATE_CENTER_REGISTRY_TIMEOUT", YAML: "registry_timeout", Service: DataPlane,
			Doc:   "A registry connection that moves no byte for this long fails the build as stalled; it also bounds resolving a tag. A Go duration.",
			Field: func(c *Config) any { return &c.RegistryTimeout }},
		{Env: "CUBE_TEMPLATE_CENTER_BUILD_TIMEOUT", YAML: "build_timeout", Service: DataPlane,
			Doc:   "A build that runs longer than this fails, from resolving the image to the published bytes: a registry that trickles bytes or asks to retry in a day cannot hold a build slot for ever. A Go duration.",
			Field: func(c *Config) any { return &c.BuildTimeout }},
		{Env: "CUBE_TEMPLATE_CENTER_CUBE_CA_FILE", YAML: "cube_ca_file", Service: DataPlane,
			Doc:   "CubeEgress root CA (one PEM certificate) baked into the trust stores of images whose request does not say `with_cube_ca=false`, when the master sends none (upstream's master never does; ours sends the one in `CUBE_MASTER_CA_DIR`). Read at each build; a missing file builds images without it, and their template says so (`cube_egress_ca_note`).",
			Field: func(c *Config) any { return &c.CubeCAFile }},
		{Env: "CUBE_TEMPLATE_BUILD_LIVENESS_TIMEOUT", YAML: "build_liveness_timeout", Service: Both,
			Doc: "A build job whose data plane sent no heartbeat for this long is failed (\"build abandoned\"), by any data-plane replica or the master, and its template is free again; running builds heartbeat every sixth of it, straight to the database. " +
				"A job whose data plane exited (killed, crashed) is failed at once, and redo, delete or create of its template fail it on the spot. Set the same value on both services. A Go duration, at least 1s.",
			Field: func(c *Config) any { return &c.BuildLiveness }},
		{Env: "CUBE_TEMPLATE_CENTER_PROGRESS_REPORT_INTERVAL", YAML: "progress_report_interval", Service: DataPlane,
			Doc:   "Least time between two status reports of a build that carry only progress (pulled bytes and layers, the ext4 writer's share); a phase change is reported at once. These reports give the master live progress with or without Redis. A Go duration.",
			Field: func(c *Config) any { return &c.ProgressReportInterval }},
		{Env: "CUBE_TEMPLATE_CENTER_SCRUB_INTERVAL", YAML: "scrub_interval", Service: DataPlane, ZeroOff: true,
			Doc:   "How often every READY artifact is read back from the store and checked against its sha256, a little at a time. An artifact whose bytes rotted is failed and its bytes removed, so the next build of its spec builds it again instead of reusing bytes every node refuses. `0` turns it off. A Go duration.",
			Field: func(c *Config) any { return &c.ScrubInterval }},
		{Env: "CUBE_TEMPLATE_CENTER_SCRUB_REMOTE", YAML: "scrub_remote", Service: DataPlane,
			Doc:   "`true` scrubs S3 and GCS stores too: one download of every artifact per CUBE_TEMPLATE_CENTER_SCRUB_INTERVAL. Off by default, those stores check their objects themselves.",
			Field: func(c *Config) any { return &c.ScrubRemote }},
		{Env: "CUBE_TEMPLATE_CENTER_ALLOW_LOCAL_LAYOUTS", YAML: "allow_local_layouts", Service: DataPlane,
			Doc:   "`true` accepts `ocidir://` references, which read OCI layouts on the server's disk.",
			Field: func(c *Config) any { return &c.AllowLocalLayouts }},

		{Env: "CUBE_S3_ENDPOINT", YAML: "s3.endpoint", Service: Both,
			Doc:   "S3 endpoint (`host:port` or URL). S3 is used when endpoint, bucket and both keys are set; give the same values to both services.",
			Field: func(c *Config) any { return &c.S3.Endpoint }},
		{Env: "CUBE_S3_BUCKET", YAML: "s3.bucket", Service: Both,
			Doc:   "S3 bucket of the artifacts.",
			Field: func(c *Config) any { return &c.S3.Bucket }},
		{Env: "CUBE_S3_ACCESS_KEY_ID", Aliases: []string{"CUBE_S3_ACCESS_KEY"}, Service: Both, Secret: true,
			Doc:   "S3 access key (upstream's name, shared with the volume plugins; CUBE_S3_ACCESS_KEY also works, and loses when both are set).",
			Field: func(c *Config) any { return &c.S3.AccessKey }},
		{Env: "CUBE_S3_SECRET_ACCESS_KEY", Aliases: []string{"CUBE_S3_SECRET_KEY"}, Service: Both, Secret: true,
			Doc:   "S3 secret key (upstream's name; CUBE_S3_SECRET_KEY also works, and loses when both are set).",
			Field: func(c *Config) any { return &c.S3.SecretKey }},
		{Env: "CUBE_S3_REGION", YAML: "s3.region", Service: Both,
			Doc:   "S3 region.",
			Field: func(c *Config) any { return &c.S3.Region }},
		{Env: "CUBE_S3_USE_PATH_STYLE", YAML: "s3.use_path_style", Service: Both,
			Doc:   "Path-style bucket addressing (MinIO and most self-hosted servers need it).",
			Field: func(c *Config) any { return &c.S3.UsePathStyle }},
		{Env: "CUBE_S3_USE_SSL", YAML: "s3.use_ssl", Service: Both,
			Doc:   "HTTPS to the S3 endpoint.",
			Field: func(c *Config) any { return &c.S3.UseSSL }},
		{Env: "CUBE_S3_ARTIFACT_PREFIX", YAML: "s3.artifact_prefix", Service: Both,
			Doc:   "Key prefix of the artifacts in the bucket.",
			Field: func(c *Config) any { return &c.S3.Prefix }},

		{Env: "CUBE_TEMPLATE_CENTER_RECONCILE_DISABLED", Legacy: []string{"CUBE_TC_RECONCILE_DISABLED"}, YAML: "reconcile.disabled", Service: DataPlane,
			Doc:   "`true` turns the reconciler off (stale jobs then stay as they are).",
			Field: func(c *Config) any { return &c.Reconcile.Disabled }},
		{Env: "CUBE_TEMPLATE_CENTER_RECONCILE_INTERVAL", Legacy: []string{"CUBE_TC_RECONCILE_INTERVAL"}, YAML: "reconcile.interval", Service: DataPlane,
			Doc:   "How often the reconciler looks for stale jobs and dead scratch directories.",
			Field: func(c *Config) any { return &c.Reconcile.Interval }},
		{Env: "CUBE_TEMPLATE_CENTER_RECONCILE_PENDING_STALE_AFTER", Legacy: []string{"CUBE_TC_RECONCILE_PENDING_STALE_AFTER"}, YAML: "reconcile.pending_stale_after", Service: DataPlane,
			Doc:   "A PENDING job without an update for this long is failed.",
			Field: func(c *Config) any { return &c.Reconcile.PendingStaleAfter }},
		{Env: "CUBE_TEMPLATE_CENTER_RECONCILE_PULLING_STALE_AFTER", Legacy: []string{"CUBE_TC_RECONCILE_PULLING_STALE_AFTER"}, YAML: "reconcile.pulling_stale_after", Service: DataPlane,
			Doc:   "A job in PULLING without a heartbeat for this long is failed.",
			Field: func(c *Config) any { return &c.Reconcile.PullingStaleAfter }},
		{Env: "CUBE_TEMPLATE_CENTER_RECONCILE_RUNNING_STALE_AFTER", Legacy: []string{"CUBE_TC_RECONCILE_RUNNING_STALE_AFTER"}, YAML: "reconcile.running_stale_after", Service: DataPlane,
			Doc:   "A RUNNING job past PULLING without a heartbeat for this long is failed.",
			Field: func(c *Config) any { return &c.Reconcile.RunningStaleAfter }},
		{Env: "CUBE_TEMPLATE_CENTER_RECONCILE_STALE_AFTER", Legacy: []string{"CUBE_TC_RECONCILE_STALE_AFTER"}, YAML: "reconcile.stale_after", Service: DataPlane,
			Doc:   "When set, replaces CUBE_TEMPLATE_CENTER_RECONCILE_RUNNING_STALE_AFTER (the pre-split name of the same bound).",
			Field: func(c *Config) any { return &c.Reconcile.StaleAfter }},

		{Env: "CUBE_MASTER_LISTEN", YAML: "master.listen", Upstream: []string{"common.http_bind", "common.http_port"}, Service: ControlPlane,
			Doc:   "Public API address (/cube/*, callbacks, /notify/health, /ready, /metrics). Loopback by default; set `0.0.0.0:8089` to serve other machines. `serve --listen` wins.",
			Field: func(c *Config) any { return &c.Master.Listen }},
		{Env: "CUBE_TEMPLATE_CENTER_ADDR", YAML: "master.template_center_addr", Upstream: []string{"common.template_center_addr"}, Service: ControlPlane,
			Doc:   "The data plane's base URL: build submits, artifact deletes, proxied compat and downloads.",
			Field: func(c *Config) any { return &c.Master.TemplateCenterAddr }},
		{Env: "CUBE_MASTER_NODES", YAML: "master.nodes", Service: ControlPlane,
			Doc:   "Static nodes, `id=host:port[@instanceType],...` (node agents or Cubelets, gRPC), merged with the t_cube_template_node table.",
			Field: func(c *Config) any { return &c.Master.Nodes }},
		{Env: "CUBE_MASTER_NODE_PROBE_INTERVAL", YAML: "master.node_probe_interval", Service: ControlPlane,
			Doc:   "How often each node's gRPC health is probed.",
			Field: func(c *Config) any { return &c.Master.NodeProbeInterval }},
		{Env: "CUBE_MASTER_DOWNLOAD_BASE_URL", YAML: "master.download_base_url", Service: ControlPlane, Default: "http://<listen address>",
			Doc:   "Base URL nodes download artifacts from (the master proxies the route to the data plane); unset derives it from the listen address.",
			Field: func(c *Config) any { return &c.Master.DownloadBaseURL }},
		{Env: "CUBE_MASTER_NODE_DOWNLOAD_BASE_URL", YAML: "master.node_download_base_url", Service: ControlPlane,
			Doc:   "Base URL put in the download URL every node is sent instead of the artifact's, the same on every node: a node-local cache (`nodeagent --cache-listen`, e.g. `http://127.0.0.1:8091`), so that a Cubelet downloads whole files over loopback while only missing chunks cross the network. Unset: nodes download from the master.",
			Field: func(c *Config) any { return &c.Master.NodeDownloadBaseURL }},
		{Env: "CUBE_MASTER_SWEEP_INTERVAL", YAML: "master.sweep_interval", Service: ControlPlane,
			Doc:   "How often stuck BUILT jobs are replayed and unreferenced artifacts collected.",
			Field: func(c *Config) any { return &c.Master.SweepInterval }},
		{Env: "CUBE_MASTER_CONVERGE", YAML: "master.converge", Service: ControlPlane,
			Doc:   "Distribute READY templates on their own to healthy nodes of their scope that lack them (a node back or added), each sweep.",
			Field: func(c *Config) any { return &c.Master.Converge }},
		{Env: "CUBE_MASTER_CONVERGE_BACKOFF", YAML: "master.converge_backoff", Service: ControlPlane,
			Doc:   "How long convergence leaves a template alone after its convergence job failed.",
			Field: func(c *Config) any { return &c.Master.ConvergeBackoff }},
		{Env: "CUBE_MASTER_CONVERGE_AT_ONCE", YAML: "master.converge_at_once", Service: ControlPlane,
			Doc:   "Most convergence jobs one sweep starts.",
			Field: func(c *Config) any { return &c.Master.ConvergeAtOnce }},
		{Env: "CUBE_MASTER_PLACEMENT_POLICY_FILE", YAML: "master.placement_policy_file", Service: ControlPlane,
			Doc: "Placement policy file (YAML or JSON; see docs/operations.md#placement): pinned templates (`pinned_templates`: `template_id` (id or alias), `priority`, `node_selector`, `nodes`, `min_replicas`, `max_replicas`), " +
				"per-node limits (`per_node_max_templates`, `per_node_max_bytes`), `per_template_min_redo_interval` and `node_labels`; upstream's `template_preheat` block is read too. " +
				"A policy set through the API (`PUT /cube/placement/policy`) takes its place. Unset: every template on every node, as without a policy.",
			Field: func(c *Config) any { return &c.Master.PlacementPolicyFile }},
		{Env: "CUBE_MASTER_PLACEMENT_INTERVAL", YAML: "master.placement_interval", Service: ControlPlane, ZeroOff: true,
			Doc:   "How often the placement controller runs (upstream's preheat period); one master at a time acts. `0` turns it off.",
			Field: func(c *Config) any { return &c.Master.PlacementInterval }},
		{Env: "CUBE_MASTER_PLACEMENT_AT_ONCE", YAML: "master.placement_at_once", Service: ControlPlane,
			Doc:   "Most actions (redos started, replicas evicted) one placement pass takes.",
			Field: func(c *Config) any { return &c.Master.PlacementAtOnce }},
		{Env: "CUBE_MASTER_REPLICA_CHECK_AT_ONCE", YAML: "master.replica_check_at_once", Service: ControlPlane,
			Doc: "Most READY replicas one sweep re-checks on their nodes, in turn, with a CreateImage that carries the expected sha256 and size and no download URL: " +
				"a node answers from its own copy, and a replica whose node no longer holds the artifact is marked FAILED and converged back (CUBE_MASTER_CONVERGE). `0` turns it off.",
			Field: func(c *Config) any { return &c.Master.ReplicaCheckAtOnce }},
		{Env: "CUBE_MASTER_DISTRIBUTION_WORKERS", YAML: "master.distribution_workers", Service: ControlPlane,
			Doc:   "Most nodes one job copies to (CreateImage), snapshots on or cleans up at once. Upstream used 4, which sends a template to 8 nodes in two waves.",
			Field: func(c *Config) any { return &c.Master.DistributionWorkers }},
		{Env: "CUBE_MASTER_ENVD_HOST_DIR", YAML: "master.envd_host_dir", Service: ControlPlane,
			Doc:   "Directory holding the envd binary injected into templates that ask for it; a missing binary disables injection.",
			Field: func(c *Config) any { return &c.Master.EnvdHostDir }},
		{Env: "CUBE_MASTER_LOCAL_ARTIFACT_DIR", Legacy: []string{legacyStoreDir}, YAML: "master.local_artifact_dirs", Service: ControlPlane,
			Doc:   "Comma-separated roots of legacy artifacts on the master's disk that `tpl merge` may read and remove.",
			Field: func(c *Config) any { return &c.Master.LocalArtifactDirs }},
		{Env: "CUBE_MASTER_LOG_LEVEL", YAML: "master.log.level", Service: ControlPlane,
			Doc:   "Master log level: debug, info, warn or error; `--log-level` wins.",
			Field: func(c *Config) any { return &c.Master.Log.Level }},
		{Env: "CUBE_MASTER_LOG_FORMAT", YAML: "master.log.format", Service: ControlPlane,
			Doc:   "Master log format: json or text; `--log-format` wins.",
			Field: func(c *Config) any { return &c.Master.Log.Format }},
		{Env: "CUBE_MASTER_SEALING_KEYS", Service: ControlPlane, Secret: true,
			Doc: "Keys that seal the registry credentials a template was created with, kept for redo: `id:secret,...` (ids of letters, digits, `-`, `_`; secrets of at least 32 characters, `openssl rand -hex 32`). " +
				"The first seals, every one listed opens: to rotate, put a new key first and keep the old one until the master has started once (it seals every value again with the first key when it starts). " +
				"Give every master replica the same keys. Unset, and without CUBE_MASTER_SEALING_KEY_FILE, credentials are not kept (a redo that rebuilds a private image needs them again); values sealed before with a key derived from the callback token still open, and are sealed again once a key is set.",
			Field: func(c *Config) any { return &c.Master.SealingKeys }},
		{Env: "CUBE_MASTER_SEALING_KEY_FILE", YAML: "master.sealing_key_file", Service: ControlPlane,
			Doc:   "File holding the sealing keys instead (one `id:secret` a line, `#` comments; the first seals), readable by its owner only (mode 0600). CUBE_MASTER_SEALING_KEYS wins. `cubemaster dev` creates one in its data directory.",
			Field: func(c *Config) any { return &c.Master.SealingKeyFile }},
		{Env: "CUBE_MASTER_CA_DIR", YAML: "master.ca_dir", Service: ControlPlane,
			Doc:   "Directory holding the CubeEgress root CA (`cube-root-ca.crt`, `cube-root-ca.key`) served on /cube/ca/{filename}; the key only with the shared token. `cube-root-ca.crt` is also sent with every build that wants it baked into its image (`with_cube_ca`, true unless a request says false).",
			Field: func(c *Config) any { return &c.Master.CADir }},

		{Env: "CUBE_MASTER_NODE_TOKEN", Service: ControlPlane, Secret: true,
			Doc: "Node credential sent on every call to a node (gRPC metadata `x-cube-node-token`, health probes included): every nodeagent's CUBE_NODEAGENT_TOKEN. " +
				"Node agents refuse calls without it; upstream Cubelets ignore it. At least 16 characters (`openssl rand -hex 32`); unset sends none (Cubelets only). `cubemaster dev` generates one.",
			Field: func(c *Config) any { return &c.Master.NodeToken }},
		{Env: "CUBE_MASTER_NODE_TLS_CA", YAML: "master.node_tls.ca", Service: ControlPlane,
			Doc:   "CA (PEM) that signed the nodes' gRPC server certificates: set, the master speaks TLS to every node (node agents started with `--tls-cert`); unset, plain gRPC.",
			Field: func(c *Config) any { return &c.Master.NodeTLS.CA }},
		{Env: "CUBE_MASTER_NODE_TLS_CERT", YAML: "master.node_tls.cert", Service: ControlPlane,
			Doc:   "Client certificate (PEM) the master presents to nodes over TLS, for node agents started with `--tls-client-ca` (mutual TLS); with CUBE_MASTER_NODE_TLS_KEY.",
			Field: func(c *Config) any { return &c.Master.NodeTLS.Cert }},
		{Env: "CUBE_MASTER_NODE_TLS_KEY", YAML: "master.node_tls.key", Service: ControlPlane,
			Doc:   "Private key (PEM) of CUBE_MASTER_NODE_TLS_CERT.",
			Field: func(c *Config) any { return &c.Master.NodeTLS.Key }},

		{Env: "CUBE_MASTER_AUTH", YAML: "master.auth.enabled", Upstream: []string{"auth.enable"}, Service: ControlPlane,
			Doc: "Authenticate the public /cube/* API (not /notify/health, /ready, /metrics, /openapi.json, artifact downloads, which carry their own token, or the callback): " +
				"a bearer token or upstream's signed `cube_*` headers, refused with ret_code 130401. On by default: `serve` refuses to start without a credential " +
				"(CUBE_MASTER_AUTH_BEARER_TOKENS or CUBE_MASTER_AUTH_SECRET_KEYS) unless this is `false`. `cubemaster dev` turns it off. " +
				"Download tokens and registry credentials in answers are shown only to authenticated callers.",
			Field: func(c *Config) any { return &c.Master.Auth.Enabled }},
		{Env: "CUBE_MASTER_AUTH_BEARER_TOKENS", Service: ControlPlane, Secret: true,
			Doc:   "Comma-separated tokens accepted as `Authorization: Bearer <token>` (at least 16 characters each: `openssl rand -hex 32`); cubemastercli sends CUBE_MASTER_TOKEN.",
			Field: func(c *Config) any { return &c.Master.Auth.BearerTokens }},
		{Env: "CUBE_MASTER_AUTH_SECRET_KEYS", Upstream: []string{"auth.secret_key_map"}, Service: ControlPlane, Secret: true,
			Doc: "Signing keys of upstream's signed headers, `user=secret,...` (or a JSON object); upstream's `auth.secret_key_map` (groups of user: secret) also fills it. " +
				"cubemastercli signs with CUBE_MASTER_USER_ID and CUBE_MASTER_SECRET_KEY.",
			Field: func(c *Config) any { return &c.Master.Auth.SecretKeys }},
		{Env: "CUBE_MASTER_AUTH_EXPIRY", YAML: "master.auth.expiry", Upstream: []string{"auth.signature_expire_time_insec"}, Service: ControlPlane,
			Doc:   "How far a signed request's `cube_timestamp` may be from the master's clock, either way; its nonce is refused again for twice as long (upstream's key is in seconds).",
			Field: func(c *Config) any { return &c.Master.Auth.Expiry }},

		{Env: "CUBE_MASTER_ENABLE_EXPOSED_PORT", YAML: "master.request.enable_exposed_port", Upstream: []string{"cubelet_conf.enable_exposed_port"}, Service: ControlPlane,
			Doc:   "Sandbox requests sent to nodes expose ports: a request's `com.exposed_ports` annotation, else CUBE_MASTER_EXPOSED_PORTS. Off exposes only envd's port.",
			Field: func(c *Config) any { return &c.Master.Request.EnableExposedPort }},
		{Env: "CUBE_MASTER_EXPOSED_PORTS", YAML: "master.request.exposed_port_list", Upstream: []string{"cubelet_conf.exposed_port_list"}, Service: ControlPlane,
			Doc:   "Ports exposed when a request names none.",
			Field: func(c *Config) any { return &c.Master.Request.ExposedPortList }},
		{Env: "CUBE_MASTER_BLK_QOS", YAML: "master.request.blk_qos", Upstream: []string{"extra_conf.blk_qos"}, Service: ControlPlane,
			Doc:   "The `cube.master.blk.qos` annotation of requests sent to nodes.",
			Field: func(c *Config) any { return &c.Master.Request.BlkQos }},
		{Env: "CUBE_MASTER_BLK_QOS_MAP", YAML: "master.request.blk_qos_map", Upstream: []string{"extra_conf.blk_qos_map"}, Service: ControlPlane,
			Doc:   "`cube.master.blk.qos` by instance type (a JSON object in the environment); wins over CUBE_MASTER_BLK_QOS for the types it names.",
			Field: func(c *Config) any { return &c.Master.Request.BlkQosMap }},
		{Env: "CUBE_MASTER_FS_QOS", YAML: "master.request.fs_qos", Upstream: []string{"extra_conf.fs_qos"}, Service: ControlPlane,
			Doc:   "The `cube.master.fs.qos` annotation of requests sent to nodes.",
			Field: func(c *Config) any { return &c.Master.Request.FsQos }},
		{Env: "CUBE_MASTER_FS_QOS_MAP", YAML: "master.request.fs_qos_map", Upstream: []string{"extra_conf.fs_qos_map"}, Service: ControlPlane,
			Doc:   "`cube.master.fs.qos` by instance type (a JSON object in the environment); wins over CUBE_MASTER_FS_QOS for the types it names.",
			Field: func(c *Config) any { return &c.Master.Request.FsQosMap }},
		{Env: "CUBE_MASTER_REGION", YAML: "master.request.region", Upstream: []string{"log.region"}, Service: ControlPlane,
			Doc:   "Fills `cube.master.instance.region` of a request that has none.",
			Field: func(c *Config) any { return &c.Master.Request.Region }},
		{Env: "CUBE_MASTER_HOST_MOUNT_PREFIXES", YAML: "master.request.host_mount_prefixes", Service: ControlPlane,
			Doc:   "Host-dir volume paths must be one of these directories or under one (paths and prefixes are cleaned; `/data/shared` admits `/data/shared/x`, not `/data/shared-x`).",
			Field: func(c *Config) any { return &c.Master.Request.HostMountPrefixes }},
		{Env: "CUBE_MASTER_CREATE_IMAGE_TIMEOUT", YAML: "master.request.create_image_timeout", Upstream: []string{"cubelet_conf.create_image_timeout_insec"}, Service: ControlPlane,
			Doc:   "Bound of one CreateImage call to a node (upstream's key is in seconds).",
			Field: func(c *Config) any { return &c.Master.Request.CreateImageTimeout }},
	}
}

// IgnoredVariable is an upstream variable this service accepts and does
// not act on: setting it (to a value Active accepts) logs Reason at
// start-up, and it is never reported as unknown.
type IgnoredVariable struct {
	Env    string
	Legacy []string
	// WhenTrue: only a true value (1, true, yes, on) is logged, because
	// upstream's default (off) is what this service always does.
	WhenTrue bool
	Reason   string
}

func (v IgnoredVariable) active(val string) bool {
	if v.WhenTrue {
		return upstreamTruthy(val)
	}
	return strings.TrimSpace(val) != ""
}

// IgnoredVariables lists the upstream variables accepted and ignored.
func IgnoredVariables() []IgnoredVariable {
	return []IgnoredVariable{
		{Env: "CUBE_TEMPLATE_CENTER_LOOP_MOUNT_EXT4_ENABLED", Legacy: []string{"CUBEMASTER_LOOP_MOUNT_EXT4_ENABLED"},
			Reason: "no builder here loop-mounts an image: both write the ext4 straight from the layer stream, without root or a loop device"},
		{Env: "CUBE_TEMPLATE_CENTER_SERVE_TEMPLATE_API", Legacy: []string{"CUBE_TC_SERVE_TEMPLATE_API"}, WhenTrue: true,
			Reason: "the public /cube/template routes are always served by cubemaster: a second writer of the template tables is what upstream's default (false) avoids too"},
	}
}

// Lookup returns the setting named env.
func Lookup(env string) (Setting, bool) {
	for _, s := range Settings() {
		if s.Env == env {
			return s, true
		}
	}
	return Setting{}, false
}

// Dirs are the per-user directories defaults live in.
type Dirs struct {
	State string // databases, artifacts, scratch and the layer cache
}

// UserDirs is the state directory of the user running the process:
// /var/lib/cubetemplatecenter for root (a service), else
// $XDG_STATE_HOME/cubetemplatecenter (~/.local/state/cubetemplatecenter).
// It is per user so that a later build by another user never meets a
// directory it cannot write (as a shared /tmp cache did).
func UserDirs() Dirs {
	state := os.Getenv("XDG_STATE_HOME")
	switch {
	case state != "":
	case os.Geteuid() == 0:
		return Dirs{State: "/var/lib/cubetemplatecenter"}
	default:
		home, err := os.UserHomeDir()
		if err != nil || home == "" {
			home = filepath.Join(os.TempDir(), fmt.Sprintf("cubetemplatecenter-%d", os.Geteuid()))
		}
		state = filepath.Join(home, ".local", "state")
	}
	return Dirs{State: filepath.Join(state, "cubetemplatecenter")}
}

// Value renders the setting's current value in c (secrets redacted).
func (s Setting) Value(c *Config) string {
	v := render(s.Field(c))
	if s.Secret && v != "" {
		return "<redacted>"
	}
	if strings.HasSuffix(s.Env, "_DSN") {
		return RedactDSN(v)
	}
	return v
}

func render(p any) string {
	switch v := p.(type) {
	case *string:
		return *v
	case *[]string:
		return strings.Join(*v, ",")
	case *map[string]string:
		if len(*v) == 0 {
			return ""
		}
		b, _ := json.Marshal(*v) // keys sorted
		return string(b)
	case *UserSecrets:
		keys := slices.Sorted(maps.Keys(*v))
		for i, k := range keys {
			keys[i] = k + "=" + (*v)[k]
		}
		return strings.Join(keys, ",")
	case *int:
		return strconv.Itoa(*v)
	case *int64:
		return strconv.FormatInt(*v, 10)
	case *bool:
		return strconv.FormatBool(*v)
	case *time.Duration:
		return v.String()
	}
	panic(fmt.Sprintf("config: unsupported setting type %T", p))
}

// RedactDSN hides the password of a database DSN, in every form the store
// accepts (see entstore.ParseDSN), the bare go-sql-driver one included.
func RedactDSN(dsn string) string {
	scheme, rest, ok := strings.Cut(dsn, "://")
	if !ok {
		if strings.HasPrefix(dsn, "file:") {
			return dsn // SQLite: no password
		}
		return redactMySQL(dsn)
	}
	if scheme == "mysql" || scheme == "mariadb" {
		return scheme + "://" + redactMySQL(rest)
	}
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		return dsn
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "redacted")
		return strings.Replace(u.String(), ":redacted@", ":<redacted>@", 1)
	}
	return dsn
}

// redactMySQL hides the password of user:pass@net(addr)/db, which is not
// a URL. It splits the way go-sql-driver does: the database name after the
// last '/', the password between the first ':' and the last '@' before it.
func redactMySQL(dsn string) string {
	end := strings.LastIndex(dsn, "/")
	if end < 0 {
		end = len(dsn)
	}
	at := strings.LastIndex(dsn[:end], "@")
	if at < 0 {
		at = strings.LastIndex(dsn, "@") // malformed: hide too much rather than too little
	}
	if at <= 0 {
		return dsn
	}
	user, _, hasPass := strings.Cut(dsn[:at], ":")
	if !hasPass {
		return dsn
	}
	return user + ":<redacted>" + dsn[at:]
}

// ForService lists the settings a service reads.
func ForService(service string) []Setting {
	var out []Setting
	for _, s := range Settings() {
		if s.Service == Both || s.Service == service {
			out = append(out, s)
		}
	}
	return out
}

// knownNames are every variable name the apps read.
func knownNames() []string {
	var names []string
	for _, s := range Settings() {
		names = append(names, s.Env)
		names = append(names, s.Aliases...)
		names = append(names, s.Legacy...)
	}
	for _, v := range IgnoredVariables() {
		names = append(names, v.Env)
		names = append(names, v.Legacy...)
	}
	for _, s := range NodeAgentSettings() {
		names = append(names, s.Env)
	}
	for _, v := range OtherVariables {
		names = append(names, v.Env)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// checkedPrefixes are the prefixes whose unknown variables are reported.
var checkedPrefixes = []string{"CUBE_TEMPLATE_CENTER_", "CUBE_MASTER_"}

// UnknownVariables warns about CUBE_TEMPLATE_CENTER_* and CUBE_MASTER_*
// variables in environ (NAME=value) that no setting reads, naming the
// nearest known one: a typo otherwise silently leaves the default.
func UnknownVariables(environ []string) []string {
	known := knownNames()
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.ContainsFunc(checkedPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		if _, found := slices.BinarySearch(known, name); found {
			continue
		}
		out = append(out, fmt.Sprintf("unknown variable %s is ignored; did you mean %s?", name, nearest(name, known)))
	}
	slices.Sort(out)
	return out
}

// nearest is the known name with the smallest edit distance to name.
func nearest(name string, known []string) string {
	best, bestD := "", -1
	for _, k := range known {
		if d := editDistance(name, k); bestD < 0 || d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

type reader struct {
	env      Env
	warnings []string
	err      error
	sources  map[string]string
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
		r.sources[name] = "env"
		return v, true
	}
	for _, l := range legacy {
		if v, ok := r.env(l); ok {
			r.warnings = append(r.warnings, fmt.Sprintf("%s is deprecated; use %s", l, name))
			r.sources[name] = "env (legacy " + l + ")"
			return v, true
		}
	}
	return "", false
}

// lookupSetting finds s's value: Env, then its aliases (an empty value
// counts as unset; when several disagree the first wins, with a warning
// that shows the values unless the setting is secret), then its legacy
// names.
func (r *reader) lookupSetting(s Setting) (string, bool) {
	legacy := s.Legacy
	if s.Env == "CUBE_MASTER_LOCAL_ARTIFACT_DIR" {
		legacy = nil // Load applies the legacy store dir without a second warning
	}
	if len(s.Aliases) == 0 {
		return r.lookup(s.Env, legacy...)
	}
	var used, val string
	for _, name := range append([]string{s.Env}, s.Aliases...) {
		v, ok := r.env(name)
		if v = strings.TrimSpace(v); !ok || v == "" {
			continue
		}
		switch {
		case used == "":
			used, val = name, v
		case v != val && s.Secret:
			r.warnings = append(r.warnings, fmt.Sprintf("%s and %s disagree; using %s", used, name, used))
		case v != val:
			r.warnings = append(r.warnings, fmt.Sprintf("%s=%q is ignored because %s=%q is set", name, v, used, val))
		}
	}
	if used == "" {
		return r.lookup(s.Env, legacy...)
	}
	for _, l := range legacy {
		if _, ok := r.env(l); !ok {
			continue
		}
		if used == s.Env {
			r.warnings = append(r.warnings, fmt.Sprintf("both %s and legacy %s are set; using %s", s.Env, l, s.Env))
		} else {
			r.warnings = append(r.warnings, fmt.Sprintf("%s is deprecated; use %s", l, s.Env))
		}
	}
	r.sources[s.Env] = "env"
	if used != s.Env {
		r.sources[s.Env] = "env (" + used + ")"
	}
	return val, true
}

// apply sets s from the environment, if it is set there.
func (r *reader) apply(c *Config, s Setting) {
	v, ok := r.lookupSetting(s)
	if !ok {
		return
	}
	v = strings.TrimSpace(v)
	switch dst := s.Field(c).(type) {
	case *string:
		*dst = v
	case *[]string:
		*dst = nil
		for _, item := range strings.Split(v, ",") {
			if item = strings.TrimSpace(item); item != "" {
				*dst = append(*dst, item)
			}
		}
	case *map[string]string:
		if v == "" {
			*dst = nil
			return
		}
		var m map[string]string
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			r.fail(fmt.Errorf("%s: %q is not a JSON object of strings", s.Env, v))
			return
		}
		*dst = m
	case *UserSecrets:
		m, err := parseUserSecrets(v)
		if err != nil {
			r.fail(fmt.Errorf("%s: %w", s.Env, err))
			return
		}
		*dst = m
	case *int:
		if v == "" {
			return
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			r.fail(fmt.Errorf("%s: %q is not an integer", s.Env, v))
			return
		}
		*dst = n
	case *int64:
		if v == "" {
			return
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			r.fail(fmt.Errorf("%s: %q is not an integer", s.Env, v))
			return
		}
		*dst = n
	case *bool:
		if v == "" {
			return
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			r.fail(fmt.Errorf("%s: %q is not a boolean", s.Env, v))
			return
		}
		*dst = b
	case *time.Duration:
		if v == "" {
			return
		}
		d, err := time.ParseDuration(v)
		switch {
		case s.ZeroOff && (err != nil || d < 0):
			r.fail(fmt.Errorf("%s: %q is not 0 (off) or a positive Go duration (e.g. 90s, 10m)", s.Env, v))
			return
		case !s.ZeroOff && (err != nil || d <= 0):
			r.fail(fmt.Errorf("%s: %q is not a positive Go duration (e.g. 90s, 10m)", s.Env, v))
			return
		}
		*dst = d
	default:
		panic(fmt.Sprintf("config: setting %s has unsupported type %T", s.Env, dst))
	}
}

// parseUserSecrets reads user=secret pairs, comma-separated, or a JSON
// object of strings. Errors never quote a secret.
func parseUserSecrets(v string) (UserSecrets, error) {
	if v == "" {
		return nil, nil
	}
	m := UserSecrets{}
	if strings.HasPrefix(v, "{") {
		if err := json.Unmarshal([]byte(v), (*map[string]string)(&m)); err != nil {
			return nil, fmt.Errorf("not a JSON object of strings")
		}
	} else {
		for i, pair := range strings.Split(v, ",") {
			if pair = strings.TrimSpace(pair); pair == "" {
				continue
			}
			user, secret, ok := strings.Cut(pair, "=")
			user, secret = strings.TrimSpace(user), strings.TrimSpace(secret)
			if !ok || user == "" || secret == "" {
				return nil, fmt.Errorf("entry %d is not user=secret", i+1)
			}
			if _, dup := m[user]; dup {
				return nil, fmt.Errorf("user %q is listed twice", user)
			}
			m[user] = secret
		}
	}
	for user, secret := range m {
		if strings.TrimSpace(user) == "" || strings.TrimSpace(secret) == "" {
			return nil, fmt.Errorf("user %q has an empty user id or secret", user)
		}
	}
	return m, nil
}

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// Known reports whether the apps read a variable of this name (a setting,
// a legacy name, a node agent flag's variable or one of OtherVariables).
func Known(name string) bool {
	if _, ok := slices.BinarySearch(knownNames(), name); ok {
		return true
	}
	return slices.ContainsFunc(OtherVariables, func(v struct{ Env, Doc string }) bool { return v.Env == name })
}
