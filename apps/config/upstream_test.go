package config

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestUpstreamMasterConf(t *testing.T) {
	for _, strict := range []string{"false", "true"} {
		c, err := Load(mapEnv(map[string]string{"CUBE_MASTER_CONFIG_PATH": "testdata/upstream-cubemaster.yaml", "CUBE_TEMPLATE_CENTER_STRICT_CONFIG": strict}))
		if err != nil {
			t.Fatalf("strict=%s: %v", strict, err)
		}
		if c.Master.Listen != "0.0.0.0:8089" || c.Master.TemplateCenterAddr != "http://127.0.0.1:8090" {
			t.Errorf("listen %q, template center %q", c.Master.Listen, c.Master.TemplateCenterAddr)
		}
		if want := "mysql://cube:p@ss@tcp(127.0.0.1:3306)/cube_mysql?parseTime=true&readTimeout=5s&timeout=5s&writeTimeout=5s"; c.DBDSN != want || c.Master.DBDSN != want {
			t.Errorf("DSN %q / %q, want %q", c.DBDSN, c.Master.DBDSN, want)
		}
		r := c.Master.Request
		if !r.EnableExposedPort || !slices.Equal(r.ExposedPortList, []string{"80"}) || r.Region != "ap-guangzhou" || r.CreateImageTimeout != 300*time.Second {
			t.Errorf("request settings %+v", r)
		}
		// log is a section of both files: level is ours (the data plane's),
		// region upstream's, the rest listed as not used.
		if c.Log.Level != "info" || c.Master.Log.Level != "info" {
			t.Errorf("log levels %q / %q", c.Log.Level, c.Master.Log.Level)
		}
		// --print-config says which upstream key a value came from.
		if src := c.Sources["CUBE_MASTER_LISTEN"]; src != "file (upstream common.http_bind/http_port)" {
			t.Errorf("CUBE_MASTER_LISTEN source %q", src)
		}
		if src := c.Sources["CUBE_MASTER_REGION"]; src != "file (upstream log.region)" {
			t.Errorf("CUBE_MASTER_REGION source %q", src)
		}
		// Upstream settings not used are named, never refused; upstream's
		// legacy config path name warns as before.
		w := strings.Join(c.Warnings, "\n")
		for _, want := range []string{"CUBE_MASTER_CONFIG_PATH is deprecated", "common.http_readtimeout", "cubelet_conf.grpc", "redis", "scheduler", "log.module", "log.file_size"} {
			if !strings.Contains(w, want) {
				t.Errorf("strict=%s: warnings do not mention %s:\n%s", strict, want, w)
			}
		}
		if strings.Contains(w, "unknown setting") {
			t.Errorf("an upstream key was taken for an unknown one:\n%s", w)
		}
	}
}

func TestUpstreamTemplateCenterConfAndEnvironment(t *testing.T) {
	c, err := Load(mapEnv(map[string]string{"CUBE_TEMPLATE_CENTER_CONFIG_PATH": "testdata/upstream-templatecenter.yaml"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "0.0.0.0:8090" || c.MasterAddr != "http://127.0.0.1:8089" {
		t.Errorf("listen %q, master %q", c.Listen, c.MasterAddr)
	}
	if c.DBDSN != "postgres://cube:pw@localhost:5432/cube?connect_timeout=3" {
		t.Errorf("DSN %q", c.DBDSN)
	}
	// The environment wins, as upstream's does.
	c, err = Load(mapEnv(map[string]string{"CUBE_TEMPLATE_CENTER_CONFIG_PATH": "testdata/upstream-templatecenter.yaml",
		"CUBE_MASTER_ADDR": "http://m:1", "CUBE_TEMPLATE_CENTER_LISTEN": ":9000", "CUBE_TEMPLATE_CENTER_DB_DSN": "sqlite:///x.db"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.MasterAddr != "http://m:1" || c.Listen != ":9000" || c.DBDSN != "sqlite:///x.db" {
		t.Errorf("environment lost: %q %q %q", c.MasterAddr, c.Listen, c.DBDSN)
	}
}

func TestOurKeysWinOverUpstreamKeys(t *testing.T) {
	p := filepath.Join(t.TempDir(), "conf.yaml")
	body := "listen: \":7000\"\nmaster_addr: http://ours:1\ndb_dsn: sqlite:///ours.db\nmaster:\n  request:\n    region: ours\n" +
		"common:\n  http_port: 8090\n  master_addr: http://theirs:1\nlog:\n  region: theirs\ninstance_db_config:\n  addr: h:1\n  db_name: d\n"
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(mapEnv(map[string]string{"CUBE_TEMPLATE_CENTER_CONFIG_PATH": p}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != ":7000" || c.MasterAddr != "http://ours:1" || c.DBDSN != "sqlite:///ours.db" || c.Master.Request.Region != "ours" {
		t.Errorf("got %q %q %q %q", c.Listen, c.MasterAddr, c.DBDSN, c.Master.Request.Region)
	}
	if c.Master.Listen != ":8090" {
		t.Errorf("master listen %q: an upstream key fills what ours leave unset", c.Master.Listen)
	}
}

func TestUpstreamEnvironmentNames(t *testing.T) {
	c, err := Load(mapEnv(map[string]string{
		"CUBEMASTER_LOOP_MOUNT_EXT4_ENABLED": "true", "CUBE_SANDBOX_NODE_IP": "10.1.2.3", "CUBE_AUTO_MIGRATION": "false",
		"CUBE_TC_SERVE_TEMPLATE_API": "yes",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeIP != "10.1.2.3" || c.AutoMigrate {
		t.Errorf("node ip %q, auto migrate %v", c.NodeIP, c.AutoMigrate)
	}
	w := strings.Join(c.Warnings, "\n")
	if !strings.Contains(w, "CUBE_TEMPLATE_CENTER_LOOP_MOUNT_EXT4_ENABLED is ignored because") || !strings.Contains(w, "CUBEMASTER_LOOP_MOUNT_EXT4_ENABLED is deprecated") {
		t.Errorf("warnings %q", c.Warnings)
	}
	if !strings.Contains(w, "CUBE_TEMPLATE_CENTER_SERVE_TEMPLATE_API is ignored because") {
		t.Errorf("warnings %q", c.Warnings)
	}
	c, _ = Load(mapEnv(map[string]string{"CUBE_TEMPLATE_CENTER_NODE_IP": "10.9.9.9", "CUBE_SANDBOX_NODE_IP": "10.1.2.3"}))
	if c.NodeIP != "10.9.9.9" {
		t.Errorf("node ip %q, want the template center's own name first", c.NodeIP)
	}
	if d, _ := Load(nil); !d.AutoMigrate {
		t.Error("auto migration off by default")
	}
}

func TestTemplateCenterListenNarrowsToTheNodeIP(t *testing.T) {
	local := func(ip net.IP) bool { return ip.Equal(net.ParseIP("10.1.2.3")) }
	conf := filepath.Join(t.TempDir(), "conf.yaml")
	write := func(body string) {
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		file string
		env  map[string]string
		want string
	}{
		{"no node ip", "", nil, "127.0.0.1:8090"},
		{"node ip of this host", "", map[string]string{"CUBE_SANDBOX_NODE_IP": "10.1.2.3"}, "10.1.2.3:8090"},
		{"http_bind 0.0.0.0 is not a choice", "common:\n  http_bind: 0.0.0.0\n  http_port: 8091\n", map[string]string{"CUBE_SANDBOX_NODE_IP": "10.1.2.3"}, "10.1.2.3:8091"},
		{"explicit http_bind wins", "common:\n  http_bind: 127.0.0.1\n  http_port: 8091\n", map[string]string{"CUBE_SANDBOX_NODE_IP": "10.1.2.3"}, "127.0.0.1:8091"},
		{"explicit listen wins", "", map[string]string{"CUBE_SANDBOX_NODE_IP": "10.1.2.3", "CUBE_TEMPLATE_CENTER_LISTEN": ":7000"}, ":7000"},
		{"not this host's (a pod)", "", map[string]string{"CUBE_SANDBOX_NODE_IP": "10.9.9.9"}, "127.0.0.1:8090"},
		{"not an IP", "", map[string]string{"CUBE_SANDBOX_NODE_IP": "node-a"}, "127.0.0.1:8090"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range tc.env {
				env[k] = v
			}
			if tc.file != "" {
				write(tc.file)
				env["CUBE_TEMPLATE_CENTER_CONFIG_PATH"] = conf
			}
			c, err := Load(mapEnv(env))
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := c.TemplateCenterListen(local); got != tc.want {
				t.Errorf("listen %q, want %q", got, tc.want)
			}
		})
	}
}

func TestUpstreamArtifactStoreEnvironment(t *testing.T) {
	s3 := map[string]string{"CUBE_S3_ENDPOINT": "http://s3", "CUBE_S3_BUCKET": "b", "CUBE_S3_ACCESS_KEY_ID": "k", "CUBE_S3_SECRET_ACCESS_KEY": "s"}
	with := func(extra map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range s3 {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	def := Defaults().ArtifactStoreDir
	cases := []struct {
		name    string
		env     map[string]string
		s3      bool
		dir     string
		warning string
	}{
		{name: "canonical key names", env: s3, s3: true, dir: def},
		{name: "short key names", env: map[string]string{"CUBE_S3_ENDPOINT": "http://s3", "CUBE_S3_BUCKET": "b", "CUBE_S3_ACCESS_KEY": "k", "CUBE_S3_SECRET_KEY": "s"}, s3: true, dir: def},
		{name: "names disagree", env: with(map[string]string{"CUBE_S3_ACCESS_KEY": "other"}), s3: true, dir: def, warning: "CUBE_S3_ACCESS_KEY_ID and CUBE_S3_ACCESS_KEY disagree"},
		{name: "backend fs turns s3 off", env: with(map[string]string{"CUBE_ARTIFACT_STORE_BACKEND": "FS", "CUBE_ARTIFACT_STORE_FS_ROOT": "/srv/store"}), dir: "/srv/store"},
		{name: "fs root beats the legacy dir", env: map[string]string{"CUBE_ARTIFACT_STORE_FS_ROOT": "/srv/store", "CUBEMASTER_ROOTFS_ARTIFACT_STORE_DIR": "/old"}, dir: "/srv/store", warning: "CUBEMASTER_ROOTFS_ARTIFACT_STORE_DIR is deprecated"},
		{name: "our dir beats the fs root", env: map[string]string{"CUBE_ARTIFACT_STORE_FS_ROOT": "/srv/store", "CUBE_TEMPLATE_CENTER_ARTIFACT_STORE_DIR": "/ours"}, dir: "/ours", warning: "CUBE_ARTIFACT_STORE_FS_ROOT=\"/srv/store\" is ignored because"},
		{name: "unknown backend reads as s3", env: with(map[string]string{"CUBE_ARTIFACT_STORE_BACKEND": "gcs"}), s3: true, dir: def, warning: "is read as s3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(mapEnv(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if c.S3.Enabled() != tc.s3 || c.ArtifactStoreDir != tc.dir {
				t.Errorf("s3 %v dir %q, want %v %q", c.S3.Enabled(), c.ArtifactStoreDir, tc.s3, tc.dir)
			}
			w := strings.Join(c.Warnings, "\n")
			if tc.warning == "" && w != "" || !strings.Contains(w, tc.warning) {
				t.Errorf("warnings %q, want %q", w, tc.warning)
			}
		})
	}
}

// TestCompatibilityEnvironment pins the environment rows of
// docs/compatibility.md that no other test reads.
func TestCompatibilityEnvironment(t *testing.T) {
	c, err := Load(mapEnv(map[string]string{
		"CUBE_TEMPLATE_CALLBACK_TOKEN":             "s3cret",
		"CUBE_TEMPLATE_CALLBACK_INSECURE_NO_TOKEN": "true",
		"CUBE_TEMPLATE_CENTER_UPSTREAM_MASTER":     "true",
		"CUBE_TC_MAX_CONCURRENT_BUILDS":            "3",
		"CUBE_MASTER_ENABLE_EXPOSED_PORT":          "false",
		"CUBE_MASTER_EXPOSED_PORTS":                "80,8080",
		"CUBE_MASTER_REGION":                       "ap-shanghai",
		"CUBE_MASTER_HOST_MOUNT_PREFIXES":          "/data/shared/,/srv/",
		"CUBE_MASTER_CREATE_IMAGE_TIMEOUT":         "90s",
		"CUBE_MASTER_CA_DIR":                       "/srv/ca",
	}))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Master.Request
	checks := []struct {
		name string
		ok   bool
	}{
		{"callback token", c.CallbackToken == "s3cret"},
		{"insecure opt-out", c.CallbackInsecureNoToken},
		{"upstream master", c.UpstreamMaster},
		{"legacy build concurrency", c.MaxConcurrentBuilds == 3},
		{"exposed port switch", !r.EnableExposedPort},
		{"exposed ports", strings.Join(r.ExposedPortList, ",") == "80,8080"},
		{"region", r.Region == "ap-shanghai"},
		{"host mount prefixes", strings.Join(r.HostMountPrefixes, ",") == "/data/shared/,/srv/"},
		{"create image timeout", r.CreateImageTimeout == 90*time.Second},
		{"ca dir", c.Master.CADir == "/srv/ca"},
	}
	for _, ch := range checks {
		if !ch.ok {
			t.Errorf("%s not read from the environment: %+v", ch.name, c)
		}
	}
}

// TestCompatibilityDocNamesExistingTests: every test docs/compatibility.md
// names (a trailing * is a prefix) is a test function of the repository.
func TestCompatibilityDocNamesExistingTests(t *testing.T) {
	doc, err := os.ReadFile("../../docs/compatibility.md")
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	err = filepath.WalkDir("../..", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range testFunc.FindAllSubmatch(b, -1) {
			defined[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	named := testName.FindAllString(string(doc), -1)
	if len(named) < 40 {
		t.Fatalf("found only %d test names in docs/compatibility.md", len(named))
	}
	for _, n := range named {
		if prefix, ok := strings.CutSuffix(n, "*"); ok {
			found := false
			for d := range defined {
				found = found || strings.HasPrefix(d, prefix)
			}
			if !found {
				t.Errorf("docs/compatibility.md names %s, which matches no test", n)
			}
		} else if !defined[n] {
			t.Errorf("docs/compatibility.md names %s, which is not a test", n)
		}
	}
}

var (
	testFunc = regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+)\(`)
	testName = regexp.MustCompile(`\bTest[A-Z][A-Za-z0-9_]*\*?`)
)
