package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func mapEnv(m map[string]string) Env {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestLoadNamesAndFallbacks(t *testing.T) {
	cases := []struct {
		name     string
		env      map[string]string
		check    func(Config) bool
		warnings int
	}{
		{"defaults", nil, func(c Config) bool {
			return c.MaxConcurrentBuilds == 2 && c.Builder == "ext4stream" && !c.S3.Enabled() && c.ReleaseManifest == DefaultReleaseManifest
		}, 0},
		{"release manifest", map[string]string{"CUBE_TEMPLATE_CENTER_RELEASE_MANIFEST": "/etc/m.json"}, func(c Config) bool { return c.ReleaseManifest == "/etc/m.json" }, 0},
		{"new name", map[string]string{"CUBE_TEMPLATE_CENTER_ARTIFACT_STORE_DIR": "/a"}, func(c Config) bool { return c.ArtifactStoreDir == "/a" }, 0},
		{"legacy name warns", map[string]string{"CUBEMASTER_ROOTFS_ARTIFACT_STORE_DIR": "/legacy"}, func(c Config) bool { return c.ArtifactStoreDir == "/legacy" }, 1},
		{"new beats legacy", map[string]string{"CUBE_TEMPLATE_CENTER_ARTIFACT_WORK_DIR": "/new", "CUBEMASTER_ROOTFS_ARTIFACT_DIR": "/old"}, func(c Config) bool { return c.WorkDir == "/new" }, 1},
		{"legacy token", map[string]string{"CUBE_TC_CALLBACK_TOKEN": "s3cret"}, func(c Config) bool { return c.CallbackToken == "s3cret" }, 1},
		{"insecure registries list", map[string]string{"CUBE_TEMPLATE_CENTER_INSECURE_REGISTRIES": " a:5000, ,b "}, func(c Config) bool { return slices.Equal(c.InsecureRegistries, []string{"a:5000", "b"}) }, 0},
		{"s3 enabled only when complete", map[string]string{"CUBE_S3_ENDPOINT": "http://x", "CUBE_S3_BUCKET": "b", "CUBE_S3_ACCESS_KEY": "k"}, func(c Config) bool { return !c.S3.Enabled() }, 0},
		{"s3 complete", map[string]string{"CUBE_S3_ENDPOINT": "http://x", "CUBE_S3_BUCKET": "b", "CUBE_S3_ACCESS_KEY": "k", "CUBE_S3_SECRET_KEY": "s"}, func(c Config) bool { return c.S3.Enabled() }, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(mapEnv(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(c) {
				t.Fatalf("unexpected config %+v", c)
			}
			if len(c.Warnings) != tc.warnings {
				t.Fatalf("warnings = %q, want %d", c.Warnings, tc.warnings)
			}
		})
	}
}

func TestLoadRejectsBadValuesNamingTheVariable(t *testing.T) {
	cases := map[string]string{
		"CUBE_TEMPLATE_CENTER_MAX_CONCURRENT_BUILDS": "many",
		"CUBE_S3_USE_SSL":                     "perhaps",
		"CUBE_TEMPLATE_CENTER_HEADROOM_BYTES": "-5",
		"CUBE_TEMPLATE_CENTER_GZIP_DECODER":   "igzip", // a bare name: which one would run?
		"CUBE_TEMPLATE_CENTER_BUILD_TIMEOUT":  "0s",
		"CUBE_TEMPLATE_CENTER_SCRUB_INTERVAL": "-1h",
		"CUBE_MASTER_DISTRIBUTION_WORKERS":    "0",
	}
	for name, v := range cases {
		_, err := Load(mapEnv(map[string]string{name: v}))
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%s: err = %v, want one naming the variable", name, v, err)
		}
	}
	if _, err := Load(mapEnv(map[string]string{"CUBE_TEMPLATE_CENTER_MAX_CONCURRENT_BUILDS": "0"})); err == nil {
		t.Error("zero concurrent builds accepted")
	}
}

func TestLoadFileThenEnvironment(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tc.yaml")
	if err := os.WriteFile(p, []byte("builder: ext4stream\nmax_concurrent_builds: 4\ns3:\n  bucket: from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(mapEnv(map[string]string{"CUBE_TEMPLATE_CENTER_CONFIG_PATH": p, "CUBE_TEMPLATE_CENTER_MAX_CONCURRENT_BUILDS": "3"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Builder != "ext4stream" || c.S3.Bucket != "from-file" || c.MaxConcurrentBuilds != 3 {
		t.Fatalf("got %+v", c)
	}
	if err := os.WriteFile(p, []byte("no_such_key: 1\ns3:\n  bukket: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Unknown keys are named in warnings, or refused in strict mode.
	c, err = Load(mapEnv(map[string]string{"CUBE_TEMPLATE_CENTER_CONFIG_PATH": p}))
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(c.Warnings, "\n"); !strings.Contains(w, `"no_such_key"`) || !strings.Contains(w, `"s3.bukket"`) || len(c.Warnings) != 2 {
		t.Fatalf("warnings %q", c.Warnings)
	}
	_, err = Load(mapEnv(map[string]string{"CUBE_TEMPLATE_CENTER_CONFIG_PATH": p, "CUBE_TEMPLATE_CENTER_STRICT_CONFIG": "true"}))
	if err == nil || !strings.Contains(err.Error(), "no_such_key") || !strings.Contains(err.Error(), "s3.bukket") {
		t.Fatalf("strict mode accepted unknown keys: %v", err)
	}
}

func TestReconcileDurations(t *testing.T) {
	c, err := Load(mapEnv(map[string]string{"CUBE_TEMPLATE_CENTER_RECONCILE_INTERVAL": "90s", "CUBE_TC_RECONCILE_PULLING_STALE_AFTER": "2h"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Reconcile.Interval != 90*time.Second || c.Reconcile.PullingStaleAfter != 2*time.Hour || c.Reconcile.PendingStaleAfter != 10*time.Minute {
		t.Fatalf("reconcile %+v", c.Reconcile)
	}
	if len(c.Warnings) != 1 {
		t.Fatalf("warnings %q, want one for the legacy name", c.Warnings)
	}
	for _, v := range []string{"soon", "-1s", "0s"} {
		_, err := Load(mapEnv(map[string]string{"CUBE_TEMPLATE_CENTER_RECONCILE_INTERVAL": v}))
		if err == nil || !strings.Contains(err.Error(), "CUBE_TEMPLATE_CENTER_RECONCILE_INTERVAL") {
			t.Fatalf("%q: err = %v", v, err)
		}
	}
}

func TestMasterAddrFallbacks(t *testing.T) {
	c, _ := Load(mapEnv(map[string]string{"CUBE_MASTER_ENDPOINT": "http://m:1"}))
	if c.MasterAddr != "http://m:1" {
		t.Fatalf("MasterAddr %q", c.MasterAddr)
	}
	c, _ = Load(mapEnv(map[string]string{"CUBE_MASTER_ADDR": "http://a:1", "CUBE_MASTER_ENDPOINT": "http://m:1"}))
	if c.MasterAddr != "http://a:1" {
		t.Fatalf("MasterAddr %q", c.MasterAddr)
	}
}

func TestMasterSettings(t *testing.T) {
	cases := []struct {
		name  string
		env   map[string]string
		check func(Master) bool
	}{
		{"defaults", nil, func(m Master) bool {
			return m.Listen == "127.0.0.1:8089" && m.TemplateCenterAddr == "http://127.0.0.1:8090" && m.SweepInterval == time.Minute &&
				m.EnvdHostDir == DefaultEnvdHostDir && m.Nodes == "" && m.DownloadBaseURL == "" && m.NodeProbeInterval == 10*time.Second &&
				m.DBDSN == Defaults().DBDSN
		}},
		{"db dsn falls back to the data plane's", map[string]string{"CUBE_TEMPLATE_CENTER_DB_DSN": "sqlite:///tmp/shared.db"},
			func(m Master) bool { return m.DBDSN == "sqlite:///tmp/shared.db" }},
		{"own db dsn wins", map[string]string{"CUBE_TEMPLATE_CENTER_DB_DSN": "sqlite:///tmp/tc.db", "CUBE_MASTER_DB_DSN": "sqlite:///tmp/m.db"},
			func(m Master) bool { return m.DBDSN == "sqlite:///tmp/m.db" }},
		{"every variable", map[string]string{
			"CUBE_MASTER_LISTEN": "127.0.0.1:9000", "CUBE_TEMPLATE_CENTER_ADDR": "http://tc:8090",
			"CUBE_MASTER_NODES": "n1=127.0.0.1:7001", "CUBE_MASTER_DOWNLOAD_BASE_URL": "http://10.0.0.1:8089",
			"CUBE_MASTER_SWEEP_INTERVAL": "15s", "CUBE_MASTER_ENVD_HOST_DIR": "/opt/envd",
			"CUBE_MASTER_NODE_PROBE_INTERVAL": "250ms",
			"CUBE_MASTER_CONVERGE":            "false", "CUBE_MASTER_CONVERGE_BACKOFF": "3m", "CUBE_MASTER_CONVERGE_AT_ONCE": "2",
			"CUBE_MASTER_DISTRIBUTION_WORKERS": "64",
		}, func(m Master) bool {
			return !m.Converge && m.ConvergeBackoff == 3*time.Minute && m.ConvergeAtOnce == 2 && m.DistributionWorkers == 64 && m.NodeProbeInterval == 250*time.Millisecond && m.Listen == "127.0.0.1:9000" && m.TemplateCenterAddr == "http://tc:8090" && m.Nodes == "n1=127.0.0.1:7001" &&
				m.DownloadBaseURL == "http://10.0.0.1:8089" && m.SweepInterval == 15*time.Second && m.EnvdHostDir == "/opt/envd"
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(mapEnv(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(c.Master) {
				t.Fatalf("unexpected master config %+v", c.Master)
			}
			if len(c.Warnings) != 0 {
				t.Fatalf("warnings %q, want none", c.Warnings)
			}
		})
	}
	for _, name := range []string{"CUBE_MASTER_SWEEP_INTERVAL", "CUBE_MASTER_NODE_PROBE_INTERVAL"} {
		for _, v := range []string{"often", "0s", "-1m"} {
			_, err := Load(mapEnv(map[string]string{name: v}))
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Fatalf("%s=%q: err = %v", name, v, err)
			}
		}
	}
}

func TestMasterSettingsFromFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.yaml")
	if err := os.WriteFile(p, []byte("db_dsn: sqlite:///tmp/file.db\nmaster:\n  listen: :9999\n  sweep_interval: 30s\n  nodes: a=127.0.0.1:7001\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(mapEnv(map[string]string{"CUBE_TEMPLATE_CENTER_CONFIG_PATH": p, "CUBE_MASTER_LISTEN": ":7777"}))
	if err != nil {
		t.Fatal(err)
	}
	m := c.Master
	if m.Listen != ":7777" || m.SweepInterval != 30*time.Second || m.Nodes != "a=127.0.0.1:7001" || m.DBDSN != "sqlite:///tmp/file.db" {
		t.Fatalf("master from file then env = %+v", m)
	}
}

func TestMasterLocalArtifactDirs(t *testing.T) {
	cases := []struct {
		name    string
		env     map[string]string
		want    []string
		warning bool // a warning names CUBE_MASTER_LOCAL_ARTIFACT_DIR (the legacy name's warning is the data plane's)
	}{
		{"unset", nil, nil, false},
		{"own name, list", map[string]string{"CUBE_MASTER_LOCAL_ARTIFACT_DIR": "/data/a, /data/b,"}, []string{"/data/a", "/data/b"}, false},
		{"legacy name", map[string]string{"CUBEMASTER_ROOTFS_ARTIFACT_STORE_DIR": "/legacy"}, []string{"/legacy"}, false},
		{"own name wins", map[string]string{"CUBE_MASTER_LOCAL_ARTIFACT_DIR": "/new", "CUBEMASTER_ROOTFS_ARTIFACT_STORE_DIR": "/legacy"}, []string{"/new"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(mapEnv(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(c.Master.LocalArtifactDirs, tc.want) {
				t.Fatalf("LocalArtifactDirs = %q, want %q", c.Master.LocalArtifactDirs, tc.want)
			}
			warned := slices.ContainsFunc(c.Warnings, func(w string) bool { return strings.Contains(w, "CUBE_MASTER_LOCAL_ARTIFACT_DIR") })
			if warned != tc.warning {
				t.Fatalf("warnings %q, want a CUBE_MASTER_LOCAL_ARTIFACT_DIR one: %v", c.Warnings, tc.warning)
			}
		})
	}
}

// TestZeroTurnsOff: a duration documented as "0 turns it off" accepts 0
// from the environment and the file; the others still refuse it.
func TestZeroTurnsOff(t *testing.T) {
	for _, v := range []string{"0", "0s"} {
		c, err := Load(mapEnv(map[string]string{"CUBE_TEMPLATE_CENTER_SCRUB_INTERVAL": v}))
		if err != nil || c.ScrubInterval != 0 {
			t.Errorf("SCRUB_INTERVAL=%s: %v, interval %s; want off", v, err, c.ScrubInterval)
		}
	}
	p := filepath.Join(t.TempDir(), "tc.yaml")
	if err := os.WriteFile(p, []byte("scrub_interval: 0s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := Load(mapEnv(map[string]string{PathVariable: p})); err != nil || c.ScrubInterval != 0 {
		t.Errorf("scrub_interval: 0s in the file: %v, interval %s", err, c.ScrubInterval)
	}
	for _, s := range Settings() {
		if _, ok := s.Field(&Config{}).(*time.Duration); !ok || s.ZeroOff {
			if s.ZeroOff && !strings.Contains(s.Doc, "`0` turns it off") {
				t.Errorf("%s takes 0 but its doc does not say 0 turns it off", s.Env)
			}
			continue
		}
		if _, err := Load(mapEnv(map[string]string{s.Env: "0"})); err == nil || !strings.Contains(err.Error(), s.Env) {
			t.Errorf("%s=0: err = %v, want a refusal naming it", s.Env, err)
		}
	}
}

// TestDatabaseSetting: a service's database errors name the variable the
// operator set, for that service; a data plane that would miss the master's
// database is refused.
func TestDatabaseSetting(t *testing.T) {
	const tcDSN, mDSN = "CUBE_TEMPLATE_CENTER_DB_DSN", "CUBE_MASTER_DB_DSN"
	cases := []struct {
		name             string
		env              map[string]string
		master, dataPlan string
		refused          bool
	}{
		{"only the data plane's", map[string]string{tcDSN: "mysql://u:p@tcp(db:3306)/cube"},
			tcDSN + " (the master's database while " + mDSN + " is unset)", tcDSN, false},
		{"both", map[string]string{tcDSN: "mysql://u:p@tcp(db:3306)/cube", mDSN: "mysql://u:p@tcp(db2:3306)/cube"}, mDSN, tcDSN, false},
		{"only the master's", map[string]string{mDSN: "mysql://u:p@tcp(db:3306)/cube"}, mDSN, tcDSN + " (unset, so the default SQLite file)", true},
		{"neither", nil, mDSN + " and " + tcDSN + " (both unset, so the default SQLite file)", tcDSN + " (unset, so the default SQLite file)", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(mapEnv(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.DatabaseSetting(ControlPlane); got != tc.master {
				t.Errorf("master's database setting %q, want %q", got, tc.master)
			}
			if got := c.DatabaseSetting(DataPlane); got != tc.dataPlan {
				t.Errorf("data plane's database setting %q, want %q", got, tc.dataPlan)
			}
			err = c.CheckSharedDatabase(DataPlane)
			if (err != nil) != tc.refused || err != nil && !strings.Contains(err.Error(), tcDSN+" is not set for templatecenter") {
				t.Errorf("data plane check: %v, refused %v", err, tc.refused)
			}
			if err := c.CheckSharedDatabase(ControlPlane); err != nil {
				t.Errorf("master check: %v", err)
			}
		})
	}
}
