package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

var binaries = []string{"cubemaster", "templatecenter", "nodeagent", "cubemastercli", "ext4stream"}

var varName = regexp.MustCompile(`\bCUBE_[A-Z0-9_]*[A-Z0-9]\b`)

// checkVariables fails for a CUBE_* name in text that no app reads.
func checkVariables(t *testing.T, file, text string) {
	t.Helper()
	for _, name := range varName.FindAllString(text, -1) {
		if !config.Known(name) {
			t.Errorf("%s sets %s, which no app reads (docs/configuration.md)", file, name)
		}
	}
}

// unit parses a systemd unit or env file into key -> values.
func unit(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Errorf("%s: line %q is not key=value", path, line)
			continue
		}
		// systemd removes one pair of enclosing quotes.
		if len(v) >= 2 && (v[0] == '\'' || v[0] == '"') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		out[k] = append(out[k], v)
	}
	return out
}

func TestSystemdUnits(t *testing.T) {
	env := unit(t, "systemd/cube.env")
	b, _ := os.ReadFile("systemd/cube.env")
	checkVariables(t, "cube.env", string(b))
	if got := env["CUBE_TEMPLATE_CENTER_LISTEN"]; len(got) != 1 || !strings.HasPrefix(got[0], "127.0.0.1:") {
		t.Errorf("the data plane listens on %v, want loopback", got)
	}
	for _, svc := range []string{"cubemaster", "templatecenter", "nodeagent"} {
		u := unit(t, "systemd/"+svc+".service")
		exec := u["ExecStart"]
		if len(exec) != 1 || !strings.HasPrefix(exec[0], "/usr/local/bin/"+svc) {
			t.Errorf("%s.service ExecStart %v", svc, exec)
		}
		if !strings.Contains(strings.Join(u["EnvironmentFile"], " "), "/etc/cube/cube.env") {
			t.Errorf("%s.service does not read /etc/cube/cube.env", svc)
		}
		if svc != "nodeagent" && !strings.Contains(strings.Join(u["EnvironmentFile"], " "), "/etc/cube/token.env") {
			t.Errorf("%s.service does not read the token", svc)
		}
		if _, err := os.Stat(filepath.Join("..", "apps", svc)); err != nil {
			t.Errorf("%s.service runs a binary the repository does not build", svc)
		}
	}

	// install.sh generates a token once and keeps it.
	bin := t.TempDir()
	for _, b := range binaries {
		os.WriteFile(filepath.Join(bin, b), []byte("#!/bin/sh\n"), 0o755)
	}
	dest := t.TempDir()
	install := func() {
		cmd := exec.Command("bash", "systemd/install.sh")
		cmd.Env = append(os.Environ(), "DESTDIR="+dest, "BIN="+bin)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("install.sh: %v\n%s", err, out)
		}
	}
	install()
	tokenFile := filepath.Join(dest, "etc/cube/token.env")
	first, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^CUBE_TEMPLATE_CALLBACK_TOKEN=[0-9a-f]{64}\n$`).Match(first) {
		t.Errorf("token file %q", first)
	}
	if st, _ := os.Stat(tokenFile); st.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", st.Mode().Perm())
	}
	// And the public API's bearer token, for the master and the CLI.
	apiFile := filepath.Join(dest, "etc/cube/api-token.env")
	apiFirst, err := os.ReadFile(apiFile)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^CUBE_MASTER_AUTH_BEARER_TOKENS=([0-9a-f]{64})\nCUBE_MASTER_TOKEN=([0-9a-f]{64})\n$`).FindSubmatch(apiFirst)
	if m == nil || !bytes.Equal(m[1], m[2]) || bytes.Contains(apiFirst, first[len("CUBE_TEMPLATE_CALLBACK_TOKEN="):len(first)-1]) {
		t.Errorf("api token file %q", apiFirst)
	}
	if st, _ := os.Stat(apiFile); st.Mode().Perm() != 0o600 {
		t.Errorf("api token file mode %v, want 0600", st.Mode().Perm())
	}
	for svc, want := range map[string]bool{"cubemaster": true, "templatecenter": false, "nodeagent": false} {
		if got := strings.Contains(strings.Join(unit(t, "systemd/"+svc+".service")["EnvironmentFile"], " "), "/etc/cube/api-token.env"); got != want {
			t.Errorf("%s.service reads the public API token: %v, want %v", svc, got, want)
		}
	}
	// And the node credential, one value for the master and the node
	// agent.
	nodeFile := filepath.Join(dest, "etc/cube/node-token.env")
	nodeFirst, err := os.ReadFile(nodeFile)
	if err != nil {
		t.Fatal(err)
	}
	n := regexp.MustCompile(`^CUBE_MASTER_NODE_TOKEN=([0-9a-f]{64})\nCUBE_NODEAGENT_TOKEN=([0-9a-f]{64})\n$`).FindSubmatch(nodeFirst)
	if n == nil || !bytes.Equal(n[1], n[2]) || bytes.Equal(n[1], m[1]) {
		t.Errorf("node token file %q", nodeFirst)
	}
	if st, _ := os.Stat(nodeFile); st.Mode().Perm() != 0o600 {
		t.Errorf("node token file mode %v, want 0600", st.Mode().Perm())
	}
	for svc, want := range map[string]bool{"cubemaster": true, "templatecenter": false, "nodeagent": true} {
		if got := strings.Contains(strings.Join(unit(t, "systemd/"+svc+".service")["EnvironmentFile"], " "), "/etc/cube/node-token.env"); got != want {
			t.Errorf("%s.service reads the node credential: %v, want %v", svc, got, want)
		}
	}
	// And the key that seals the registry credentials kept for redo: a
	// key file (one id:secret line) the master's setting names.
	keyFile := filepath.Join(dest, "etc/cube/sealing.keys")
	keysFirst, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^k[0-9a-f]{8}:[0-9a-f]{64}$`).Match(keysFirst) {
		t.Errorf("sealing key file holds no id:secret line (k<8 hex>:<64 hex>)")
	}
	if st, _ := os.Stat(keyFile); st.Mode().Perm() != 0o600 {
		t.Errorf("sealing key file mode %v, want 0600", st.Mode().Perm())
	}
	if got := env["CUBE_MASTER_SEALING_KEY_FILE"]; len(got) != 1 || got[0] != "/etc/cube/sealing.keys" {
		t.Errorf("CUBE_MASTER_SEALING_KEY_FILE is %v, want the file install.sh writes", got)
	}
	if got := env["CUBE_NODEAGENT_MASTER_URLS"]; len(got) != 1 || got[0] != "http://127.0.0.1:8089" {
		t.Errorf("the node agent downloads from %v, want the master on this host", got)
	}
	install()
	if again, _ := os.ReadFile(nodeFile); !bytes.Equal(nodeFirst, again) {
		t.Error("a second install replaced the node credential")
	}
	if again, _ := os.ReadFile(keyFile); !bytes.Equal(keysFirst, again) {
		t.Error("a second install replaced the sealing key")
	}
	if again, _ := os.ReadFile(tokenFile); !bytes.Equal(first, again) {
		t.Error("a second install replaced the token")
	}
	if again, _ := os.ReadFile(apiFile); !bytes.Equal(apiFirst, again) {
		t.Error("a second install replaced the public API token")
	}
	for _, p := range []string{"usr/local/bin/cubemaster", "etc/systemd/system/templatecenter.service", "etc/cube/cube.env"} {
		if _, err := os.Stat(filepath.Join(dest, p)); err != nil {
			t.Errorf("install.sh did not install %s", p)
		}
	}
}

// TestEnvFileReadsTheSameInAShell: operators read cube.env with
// `set -a; . /etc/cube/cube.env` as well as through systemd. Every line,
// and every commented example (#NAME=value) once uncommented, gives a
// shell what systemd gives the services; the MySQL form with its tcp(...),
// shell syntax unless quoted, is among the examples.
func TestEnvFileReadsTheSameInAShell(t *testing.T) {
	b, err := os.ReadFile("systemd/cube.env")
	if err != nil {
		t.Fatal(err)
	}
	example := regexp.MustCompile(`(?m)^#(CUBE_[A-Z0-9_]+=.*)$`)
	if !regexp.MustCompile(`(?m)^#CUBE_TEMPLATE_CENTER_DB_DSN=.*tcp\(`).Match(b) {
		t.Error("cube.env shows no MySQL DSN line (#CUBE_TEMPLATE_CENTER_DB_DSN=...tcp(...))")
	}
	for i, m := range example.FindAllSubmatch(b, -1) {
		p := filepath.Join(t.TempDir(), "cube.env")
		// Each example on its own, uncommented, after the file's lines.
		if err := os.WriteFile(p, append(append(append([]byte{}, b...), m[1]...), '\n'), 0o600); err != nil {
			t.Fatal(err)
		}
		want := unit(t, p)
		cmd := exec.Command("bash", "-c", `set -a; . "$1" && env -0`, "bash", p)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("example %d (%s): a shell cannot read the file: %v\n%s", i, m[1], err, out)
			continue
		}
		got := map[string]string{}
		for _, kv := range strings.Split(string(out), "\x00") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				got[k] = v
			}
		}
		for k, vs := range want {
			if got[k] != vs[len(vs)-1] {
				t.Errorf("example %d: %s is %q in a shell, %q for systemd", i, k, got[k], vs[len(vs)-1])
			}
		}
	}
}

func TestComposeFile(t *testing.T) {
	b, err := os.ReadFile("compose/docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	checkVariables(t, "docker-compose.yml", string(b))
	var doc struct {
		Services map[string]struct {
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"mariadb", "redis", "minio", "cubemaster", "templatecenter", "nodeagent"} {
		if _, ok := doc.Services[s]; !ok {
			t.Errorf("compose lacks service %s", s)
		}
	}
	m, tc := doc.Services["cubemaster"].Environment, doc.Services["templatecenter"].Environment
	for _, k := range []string{"CUBE_TEMPLATE_CALLBACK_TOKEN", "CUBE_S3_ACCESS_KEY", "CUBE_S3_SECRET_KEY", "CUBE_TEMPLATE_CENTER_DB_DSN"} {
		if m[k] == "" || m[k] != tc[k] {
			t.Errorf("%s differs between the master (%q) and the data plane (%q)", k, m[k], tc[k])
		}
	}
	if !strings.Contains(m["CUBE_MASTER_AUTH_BEARER_TOKENS"], "CUBE_MASTER_TOKEN") || tc["CUBE_MASTER_AUTH_BEARER_TOKENS"] != "" {
		t.Errorf("public API token: master %q, data plane %q; want the master's from $CUBE_MASTER_TOKEN only", m["CUBE_MASTER_AUTH_BEARER_TOKENS"], tc["CUBE_MASTER_AUTH_BEARER_TOKENS"])
	}
	if m["CUBE_TEMPLATE_CENTER_ADDR"] != "http://templatecenter:8090" || tc["CUBE_MASTER_ADDR"] != "http://cubemaster:8089" {
		t.Errorf("the services do not point at each other: %q / %q", m["CUBE_TEMPLATE_CENTER_ADDR"], tc["CUBE_MASTER_ADDR"])
	}
	node := doc.Services["nodeagent"]
	if m["CUBE_MASTER_NODE_TOKEN"] == "" || m["CUBE_MASTER_NODE_TOKEN"] != node.Environment["CUBE_NODEAGENT_TOKEN"] {
		t.Errorf("node credential: master %q, node agent %q; want one value", m["CUBE_MASTER_NODE_TOKEN"], node.Environment["CUBE_NODEAGENT_TOKEN"])
	}
	if !strings.Contains(m["CUBE_MASTER_SEALING_KEYS"], "${CUBE_MASTER_SEALING_KEYS:?") || tc["CUBE_MASTER_SEALING_KEYS"] != "" {
		t.Errorf("sealing keys: master %q, data plane %q; want the master's from $CUBE_MASTER_SEALING_KEYS only", m["CUBE_MASTER_SEALING_KEYS"], tc["CUBE_MASTER_SEALING_KEYS"])
	}
	if !strings.Contains(strings.Join(node.Command, " "), "--master-urls "+m["CUBE_MASTER_DOWNLOAD_BASE_URL"]) {
		t.Errorf("the node agent's command %q does not download from the master's %s", node.Command, m["CUBE_MASTER_DOWNLOAD_BASE_URL"])
	}
}

func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	checkVariables(t, "Dockerfile", text)
	for _, bin := range binaries {
		if !strings.Contains(text, "/out/"+bin) {
			t.Errorf("the image lacks %s", bin)
		}
	}
	mod, _ := os.ReadFile("../go.mod")
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(mod)
	if m == nil || !strings.Contains(text, "FROM golang:"+string(m[1])) {
		t.Errorf("the build stage does not use Go %s (go.mod)", m[1])
	}
	if !strings.Contains(text, "make build") {
		t.Error("the image is not built with make build")
	}
	// What the image declares writable, it creates for its user: a fresh
	// volume (Docker's, or an emptyDir) starts from the image's directory,
	// and a missing one is root's, where nobody cannot write.
	img := readImage(t)
	if img.uid == 0 {
		t.Error("the image runs as root")
	}
	want := append([]string{img.env["XDG_STATE_HOME"]}, img.volumes...)
	for _, p := range want {
		d, ok := img.dirs[p]
		switch {
		case p == "":
			t.Error("the image sets no XDG_STATE_HOME: the services' state would go under a home nobody lacks")
		case !ok:
			t.Errorf("the image does not create %s (install -d -o %d -g %d %s)", p, img.uid, img.gid, p)
		case d.uid != img.uid || d.gid != img.gid || d.mode&0o700 != 0o700:
			t.Errorf("the image creates %s as %d:%d %o, want it owned and writable by its user %d:%d", p, d.uid, d.gid, d.mode, img.uid, img.gid)
		}
	}
}

// helm finds the helm binary scripts/tools.sh installs.
func helm(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CUBE_TEST_HELM"); p != "" {
		return p
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		p := filepath.Join(strings.TrimSpace(string(out)), "bin", "helm")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return testenv.Tool(t, "helm") // skips, or fails when servers (and tools) are required
}

const chart = "helm/cubetemplatecenter"

// render runs helm template with set values and returns the documents.
func render(t *testing.T, sets ...string) ([]map[string]any, error) {
	t.Helper()
	var args []string
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return renderArgs(t, args...)
}

// renderYAML runs helm template with args and returns its output.
func renderYAML(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(helm(t), append([]string{"template", "t", chart}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, errors.New(stderr.String())
	}
	return stdout.Bytes(), nil
}

// renderArgs is render with helm's own arguments (--set-string, -f).
func renderArgs(t *testing.T, args ...string) ([]map[string]any, error) {
	t.Helper()
	out, err := renderYAML(t, args...)
	if err != nil {
		return nil, err
	}
	var docs []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var d map[string]any
		if err := dec.Decode(&d); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("rendered YAML: %v", err)
		}
		if d != nil {
			docs = append(docs, d)
		}
	}
	return docs, nil
}

func find(docs []map[string]any, kind, nameSuffix string) map[string]any {
	for _, d := range docs {
		md, _ := d["metadata"].(map[string]any)
		if d["kind"] == kind && strings.HasSuffix(md["name"].(string), nameSuffix) {
			return d
		}
	}
	return nil
}

// path walks nested maps and the first element of lists.
func path(v any, keys ...string) any {
	for _, k := range keys {
		if l, ok := v.([]any); ok && len(l) > 0 {
			v = l[0]
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// env returns a container's environment: name -> value, or "secret:NAME/KEY".
func env(d map[string]any) map[string]string {
	out := map[string]string{}
	list, _ := path(d, "spec", "template", "spec", "containers", "env").([]any)
	for _, e := range list {
		m := e.(map[string]any)
		if v, ok := m["value"]; ok {
			out[m["name"].(string)] = v.(string)
			continue
		}
		ref := path(m, "valueFrom", "secretKeyRef").(map[string]any)
		out[m["name"].(string)] = "secret:" + ref["name"].(string) + "/" + ref["key"].(string)
	}
	return out
}

func TestHelmModes(t *testing.T) {
	dsn := "database.dsn=mysql://u:p@tcp(db:3306)/cube"
	s3 := []string{dsn, "artifactStore.s3Backed=true", "s3.endpoint=http://minio:9000", "s3.bucket=b", "s3.accessKey=k", "s3.secretKey=s"}
	cases := []struct {
		name    string
		sets    []string
		check   func(t *testing.T, docs []map[string]any)
		warning bool
	}{
		{"pvc, one replica", []string{dsn}, func(t *testing.T, docs []map[string]any) {
			if find(docs, "PersistentVolumeClaim", "-artifacts") == nil {
				t.Error("no artifact PVC")
			}
			tc := find(docs, "Deployment", "-templatecenter")
			if path(tc, "spec", "template", "spec", "affinity", "podAffinity") == nil {
				t.Error("the data plane has no same-node affinity to the master's ReadWriteOnce claim")
			}
		}, false},
		{"s3, three replicas", append(s3, "master.replicas=3", "templateCenter.replicas=3"), func(t *testing.T, docs []map[string]any) {
			if find(docs, "PersistentVolumeClaim", "-artifacts") != nil {
				t.Error("S3 mode renders a PVC")
			}
			m, tc := env(find(docs, "Deployment", "-master")), env(find(docs, "Deployment", "-templatecenter"))
			for _, k := range []string{"CUBE_S3_ENDPOINT", "CUBE_S3_BUCKET", "CUBE_S3_ACCESS_KEY", "CUBE_S3_SECRET_KEY"} {
				if m[k] == "" || m[k] != tc[k] {
					t.Errorf("%s does not reach both: master %q, data plane %q", k, m[k], tc[k])
				}
			}
		}, false},
		{"pvc, ReadWriteMany, two replicas", []string{dsn, "artifactStore.pvc.accessMode=ReadWriteMany", "master.replicas=2"}, func(t *testing.T, docs []map[string]any) {
			if path(find(docs, "Deployment", "-templatecenter"), "spec", "template", "spec", "affinity") != nil {
				t.Error("a ReadWriteMany claim needs no same-node affinity")
			}
		}, true},
		{"endpoints", []string{dsn, "templateCenterEndpoint=http://tc.internal:8090", "masterEndpoint=http://m.internal:8089"}, func(t *testing.T, docs []map[string]any) {
			if got := env(find(docs, "Deployment", "-master"))["CUBE_TEMPLATE_CENTER_ADDR"]; got != "http://tc.internal:8090" {
				t.Errorf("master CUBE_TEMPLATE_CENTER_ADDR = %q", got)
			}
			if got := env(find(docs, "Deployment", "-templatecenter"))["CUBE_MASTER_ADDR"]; got != "http://m.internal:8089" {
				t.Errorf("data plane CUBE_MASTER_ADDR = %q", got)
			}
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			docs, err := render(t, tc.sets...)
			if err != nil {
				t.Fatal(err)
			}
			// Common to every mode.
			sec := find(docs, "Secret", "-callback-token")
			if sec == nil || path(sec, "data", "token") == nil {
				t.Fatal("no generated callback token Secret")
			}
			m, d := env(find(docs, "Deployment", "-master")), env(find(docs, "Deployment", "-templatecenter"))
			if m["CUBE_TEMPLATE_CALLBACK_TOKEN"] != "secret:t-callback-token/token" || d["CUBE_TEMPLATE_CALLBACK_TOKEN"] != m["CUBE_TEMPLATE_CALLBACK_TOKEN"] {
				t.Errorf("token env: master %q, data plane %q", m["CUBE_TEMPLATE_CALLBACK_TOKEN"], d["CUBE_TEMPLATE_CALLBACK_TOKEN"])
			}
			if m["CUBE_MASTER_AUTH_BEARER_TOKENS"] != "secret:t-api-token/token" || d["CUBE_MASTER_AUTH_BEARER_TOKENS"] != "" || m["CUBE_MASTER_AUTH"] != "" {
				t.Errorf("public API token env: master %q (auth %q), data plane %q", m["CUBE_MASTER_AUTH_BEARER_TOKENS"], m["CUBE_MASTER_AUTH"], d["CUBE_MASTER_AUTH_BEARER_TOKENS"])
			}
			if sec := find(docs, "Secret", "-api-token"); sec == nil || path(sec, "data", "token") == nil {
				t.Error("no generated public API token Secret")
			}
			if sec := find(docs, "Secret", "-node-token"); sec == nil || path(sec, "data", "token") == nil ||
				m["CUBE_MASTER_NODE_TOKEN"] != "secret:t-node-token/token" || d["CUBE_MASTER_NODE_TOKEN"] != "" {
				t.Errorf("node credential: master %q, data plane %q, want the master's from a generated Secret", m["CUBE_MASTER_NODE_TOKEN"], d["CUBE_MASTER_NODE_TOKEN"])
			}
			if sec := find(docs, "Secret", "-sealing-keys"); sec == nil || path(sec, "data", "keys") == nil ||
				m["CUBE_MASTER_SEALING_KEYS"] != "secret:t-sealing-keys/keys" || d["CUBE_MASTER_SEALING_KEYS"] != "" {
				t.Errorf("sealing keys: master %q, data plane %q, want the master's from a generated Secret", m["CUBE_MASTER_SEALING_KEYS"], d["CUBE_MASTER_SEALING_KEYS"])
			}
			checkPodSecurity(t, docs, readImage(t))
			if svc := find(docs, "Service", "-templatecenter"); path(svc, "spec", "type") != "ClusterIP" {
				t.Errorf("the data plane Service is %v, want internal (ClusterIP)", path(svc, "spec", "type"))
			}
			for _, dep := range []map[string]any{find(docs, "Deployment", "-master"), find(docs, "Deployment", "-templatecenter")} {
				var all bytes.Buffer
				yaml.NewEncoder(&all).Encode(dep)
				checkVariables(t, "chart", all.String())
			}
			_, warned := path(find(docs, "Deployment", "-master"), "metadata", "annotations").(map[string]any)
			if warned != tc.warning {
				t.Errorf("install warning %v, want %v", warned, tc.warning)
			}
			tc.check(t, docs)
		})
	}
}

// checkPodSecurity: both pods run as the image's user, never root, with
// fsGroup its group (so the volumes they write are theirs), no privilege
// escalation, and, with a read-only root filesystem, a volume on every
// directory they write (XDG_STATE_HOME, /tmp).
func checkPodSecurity(t *testing.T, docs []map[string]any, img image) {
	t.Helper()
	for _, name := range []string{"-master", "-templatecenter"} {
		spec := path(find(docs, "Deployment", name), "spec", "template", "spec")
		psc, _ := path(spec, "securityContext").(map[string]any)
		if psc["runAsNonRoot"] != true || psc["runAsUser"] != img.uid || psc["runAsGroup"] != img.gid || psc["fsGroup"] != img.gid {
			t.Errorf("%s pod securityContext %v, want runAsNonRoot, runAsUser %d, runAsGroup and fsGroup %d (the image's user)", name, psc, img.uid, img.gid)
		}
		c := path(spec, "containers").([]any)[0].(map[string]any)
		csc, _ := c["securityContext"].(map[string]any)
		if csc["allowPrivilegeEscalation"] != false {
			t.Errorf("%s container securityContext %v allows privilege escalation", name, csc)
		}
		if csc["readOnlyRootFilesystem"] != true {
			continue
		}
		mounted := map[string]bool{}
		for _, m := range c["volumeMounts"].([]any) {
			mounted[m.(map[string]any)["mountPath"].(string)] = true
		}
		for _, p := range []string{img.env["XDG_STATE_HOME"], "/tmp"} {
			if !mounted[p] {
				t.Errorf("%s has a read-only root filesystem but no volume on %s, which it writes", name, p)
			}
		}
	}
}

// TestHelmAuthOff: auth.enabled=false renders no API token and tells the
// master so explicitly (it would refuse to start otherwise).
func TestHelmAuthOff(t *testing.T) {
	docs, err := render(t, "database.dsn=mysql://u:p@tcp(db:3306)/cube", "auth.enabled=false")
	if err != nil {
		t.Fatal(err)
	}
	m := env(find(docs, "Deployment", "-master"))
	if m["CUBE_MASTER_AUTH"] != "false" || m["CUBE_MASTER_AUTH_BEARER_TOKENS"] != "" || find(docs, "Secret", "-api-token") != nil {
		t.Errorf("auth off: master env %v", m)
	}
	docs, err = render(t, "database.dsn=mysql://u:p@tcp(db:3306)/cube", "auth.existingSecret=mine")
	if err != nil {
		t.Fatal(err)
	}
	if got := env(find(docs, "Deployment", "-master"))["CUBE_MASTER_AUTH_BEARER_TOKENS"]; got != "secret:mine/token" || find(docs, "Secret", "-api-token") != nil {
		t.Errorf("existing secret: %q", got)
	}
}

func TestHelmRefusals(t *testing.T) {
	dsn := "database.dsn=mysql://u:p@tcp(db:3306)/cube"
	cases := []struct {
		name string
		sets []string
		want string
	}{
		{"no database", nil, "database.dsn"},
		{"ReadWriteOnce with two masters", []string{dsn, "master.replicas=2"}, "ReadWriteOnce with master.replicas=2"},
		{"S3 without a bucket", []string{dsn, "artifactStore.s3Backed=true", "s3.endpoint=http://x", "s3.accessKey=k", "s3.secretKey=s"}, "s3.bucket"},
		{"S3 without credentials", []string{dsn, "artifactStore.s3Backed=true", "s3.endpoint=http://x", "s3.bucket=b"}, "s3.accessKey and s3.secretKey"},
		{"mkfs without root", []string{dsn, "templateCenter.builder=mkfs"}, "templateCenter.builder=mkfs needs root"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, tc.sets...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("helm template: %v, want a refusal naming %q", err, tc.want)
			}
		})
	}
	notes, _ := os.ReadFile(chart + "/templates/NOTES.txt")
	if !strings.Contains(string(notes), `include "ctc.warnings"`) {
		t.Error("NOTES.txt does not print the warnings")
	}
	if !strings.Contains(string(notes), "if not .Values.master.nodes") {
		t.Error("NOTES.txt does not say that no node is configured")
	}
	// Running as root is allowed (mkfs needs it) when asked for.
	if _, err := render(t, dsn, "templateCenter.builder=mkfs", "podSecurityContext.runAsUser=0", "podSecurityContext.runAsNonRoot=false"); err != nil {
		t.Errorf("mkfs as root: %v", err)
	}
}
