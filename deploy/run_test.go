package deploy

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// TestChartPodsRunAsTheImageUser renders the chart on its defaults (an
// artifact claim, no node configured) and runs both pods' commands the way
// Kubernetes would: as the pod's user and groups (fsGroup added), with
// their environment (Secrets resolved from the render), over fresh,
// root-owned volumes handed to fsGroup, the claim shared by both pods and
// the root filesystem read-only when the container says so. Both must
// answer their readiness and liveness probes.
func TestChartPodsRunAsTheImageUser(t *testing.T) {
	testenv.Root(t, "runs the pods' commands as the image's user")
	ctx := context.Background()
	dsn, drop, err := testenv.Database(ctx, t, "mysql", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = drop() })
	docs, err := renderArgs(t, "--set-string", "database.dsn=mysql://"+dsn)
	if err != nil {
		t.Fatal(err)
	}
	img := readImage(t)
	bin := containerBinaries(t, "cubemaster", "templatecenter")
	base := testenv.SharedTempDir(t)
	secrets := renderedSecrets(t, docs)

	type pod struct {
		name, addr string
		c          map[string]any
		p          *proc
	}
	pods := []*pod{{name: "-templatecenter"}, {name: "-master"}}
	addrs := map[string]string{} // "service:port" -> the pod's address here
	for _, pd := range pods {
		pd.addr = freeAddr(t)
		dep := find(docs, "Deployment", pd.name)
		pd.c = path(dep, "spec", "template", "spec", "containers").([]any)[0].(map[string]any)
		svc := find(docs, "Service", pd.name)
		port := path(svc, "spec", "ports", "port")
		addrs[fmt.Sprintf("%s:%v", path(svc, "metadata", "name"), port)] = pd.addr
	}
	for _, pd := range pods {
		dep := find(docs, "Deployment", pd.name)
		spec := path(dep, "spec", "template", "spec").(map[string]any)
		psc, _ := spec["securityContext"].(map[string]any)
		csc, _ := pd.c["securityContext"].(map[string]any)
		cr := creds{uid: img.uid, gid: img.gid}
		if v, ok := psc["runAsUser"].(int); ok {
			cr.uid = v
		}
		if v, ok := psc["runAsGroup"].(int); ok {
			cr.gid = v
		}
		fsGroup := -1
		if v, ok := psc["fsGroup"].(int); ok {
			fsGroup = v
			cr.groups = append(cr.groups, v)
		}
		readOnly, _ := csc["readOnlyRootFilesystem"].(bool)
		sb := newSandbox(t, img, bin, filepath.Join(base, strings.TrimPrefix(pd.name, "-")), readOnly)
		volumes := map[string]map[string]any{}
		for _, v := range spec["volumes"].([]any) {
			volumes[v.(map[string]any)["name"].(string)] = v.(map[string]any)
		}
		for _, m := range pd.c["volumeMounts"].([]any) {
			mount := m.(map[string]any)
			v := volumes[mount["name"].(string)]
			shared := ""
			if claim, ok := path(v, "persistentVolumeClaim", "claimName").(string); ok {
				shared = filepath.Join(base, "claims", claim)
			}
			sb.kubeVolume(mount["mountPath"].(string), fsGroup, shared)
		}
		env := map[string]string{}
		for _, e := range pd.c["env"].([]any) {
			m := e.(map[string]any)
			name := m["name"].(string)
			if v, ok := m["value"].(string); ok {
				env[name] = v
				continue
			}
			ref := path(m, "valueFrom", "secretKeyRef").(map[string]any)
			v, ok := secrets[ref["name"].(string)][ref["key"].(string)]
			if !ok {
				t.Fatalf("%s: %s reads secret %s/%s, which the chart does not render", pd.name, name, ref["name"], ref["key"])
			}
			env[name] = v
		}
		port := fmt.Sprint(path(pd.c, "ports", "containerPort"))
		for k, v := range env {
			v = strings.ReplaceAll(v, "0.0.0.0:"+port, pd.addr)
			for svc, a := range addrs {
				v = strings.ReplaceAll(v, svc, a)
			}
			env[k] = v
		}
		var argv []string
		for _, a := range pd.c["command"].([]any) {
			argv = append(argv, a.(string))
		}
		pd.p = sb.start(pd.name[1:], argv, env, cr)
	}
	var all []*proc
	for _, pd := range pods {
		all = append(all, pd.p)
	}
	for _, pd := range pods {
		for _, probe := range []string{"readinessProbe", "livenessProbe"} {
			p, _ := path(pd.c, probe, "httpGet", "path").(string)
			if p == "" {
				t.Fatalf("%s has no HTTP %s", pd.name, probe)
			}
			body := waitHTTP(t, "http://"+pd.addr+p, all...)
			t.Logf("%s %s %s: %s", pd.name[1:], probe, p, strings.TrimSpace(body))
		}
	}
	keepsCredentials(t, pods[1].p)
}

// keepsCredentials fails when the master, ready, said it has no sealing
// key: it would then not keep the registry credentials a redo needs.
func keepsCredentials(t *testing.T, master *proc) {
	t.Helper()
	if out := master.output(); strings.Contains(out, "registry credentials are not kept") {
		t.Errorf("the master has no sealing key:\n%s", out)
	}
}

// renderedSecrets maps the render's Secrets: name -> key -> value.
func renderedSecrets(t *testing.T, docs []map[string]any) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	for _, d := range docs {
		if d["kind"] != "Secret" {
			continue
		}
		name := path(d, "metadata", "name").(string)
		out[name] = map[string]string{}
		for k, v := range mapOf(d["stringData"]) {
			out[name][k] = fmt.Sprint(v)
		}
		for k, v := range mapOf(d["data"]) {
			b, err := base64.StdEncoding.DecodeString(fmt.Sprint(v))
			if err != nil {
				t.Fatalf("secret %s/%s: %v", name, k, err)
			}
			out[name][k] = string(b)
		}
	}
	return out
}

func mapOf(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// TestComposeServicesRunAsTheImageUser runs the compose file's node agent,
// data plane and master as the image's user, each over fresh Docker
// volumes (the image's own, filled from the image, and the named ones),
// against the test servers in place of MariaDB, Redis and MinIO, with the
// variables the file asks for exported. The master must become ready: its
// database, the data plane (same token) and the node agent (healthy) all
// up.
func TestComposeServicesRunAsTheImageUser(t *testing.T) {
	testenv.Root(t, "runs the services' commands as the image's user")
	ctx := context.Background()
	dsn, drop, err := testenv.Database(ctx, t, "mysql", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = drop() })
	redis := testenv.Get(t, testenv.RedisAddr)
	s3 := map[string]string{"http://minio:9000": testenv.Get(t, testenv.S3Endpoint)}
	s3Bucket, s3Key, s3Secret := testenv.Get(t, testenv.S3Bucket), testenv.Get(t, testenv.S3AccessKey), testenv.Get(t, testenv.S3SecretKey)

	b, err := os.ReadFile("compose/docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			Volumes     []string          `yaml:"volumes"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	exported := map[string]string{"CUBE_TEMPLATE_CALLBACK_TOKEN": "compose-callback-token-0123456789", "CUBE_MASTER_TOKEN": "compose-api-token-0123456789abcdef",
		"CUBE_MASTER_NODE_TOKEN": "compose-node-token-0123456789abcdef", "CUBE_MASTER_SEALING_KEYS": "compose:" + strings.Repeat("5e", 32)}
	interpolate := regexp.MustCompile(`\$\{([A-Z0-9_]+)(:\?[^}]*)?\}`)

	img := readImage(t)
	bin := containerBinaries(t, "cubemaster", "templatecenter", "nodeagent")
	base := testenv.SharedTempDir(t)
	order := []string{"nodeagent", "templatecenter", "cubemaster"}
	ports := map[string]string{"nodeagent": "9999", "templatecenter": "8090", "cubemaster": "8089"}
	addrs := map[string]string{}
	for _, name := range order {
		addrs[name] = freeAddr(t)
	}
	rewrite := func(name, v string) string {
		v = interpolate.ReplaceAllStringFunc(v, func(m string) string { return exported[interpolate.FindStringSubmatch(m)[1]] })
		v = strings.ReplaceAll(v, "0.0.0.0:"+ports[name], addrs[name])
		for svc, port := range ports {
			v = strings.ReplaceAll(v, svc+":"+port, addrs[svc])
		}
		for from, to := range s3 {
			v = strings.ReplaceAll(v, from, to)
		}
		return strings.ReplaceAll(v, "redis:6379", redis)
	}
	procs := map[string]*proc{}
	var all []*proc
	for _, name := range order {
		svc, ok := doc.Services[name]
		if !ok {
			t.Fatalf("compose has no service %s", name)
		}
		sb := newSandbox(t, img, bin, filepath.Join(base, name), false)
		mounted := map[string]bool{}
		for _, v := range svc.Volumes {
			_, target, ok := strings.Cut(v, ":")
			if !ok {
				t.Fatalf("%s: volume %q is not name:/path", name, v)
			}
			sb.dockerVolume(target)
			mounted[target] = true
		}
		for _, v := range img.volumes { // the image's own (anonymous) volumes
			if !mounted[v] {
				sb.dockerVolume(v)
			}
		}
		env := map[string]string{}
		for k, v := range svc.Environment {
			env[k] = rewrite(name, v)
		}
		if _, ok := env["CUBE_TEMPLATE_CENTER_DB_DSN"]; ok {
			env["CUBE_TEMPLATE_CENTER_DB_DSN"] = "mysql://" + dsn // the test server's MariaDB
			env["CUBE_S3_BUCKET"], env["CUBE_S3_ACCESS_KEY"], env["CUBE_S3_SECRET_KEY"] = s3Bucket, s3Key, s3Secret
		}
		var argv []string
		for _, a := range svc.Command {
			argv = append(argv, rewrite(name, a))
		}
		procs[name] = sb.start(name, argv, env, creds{uid: img.uid, gid: img.gid})
		all = append(all, procs[name])
	}
	waitHTTP(t, "http://"+addrs["templatecenter"]+"/ready", all...)
	body := waitHTTP(t, "http://"+addrs["cubemaster"]+"/ready", all...)
	if !strings.Contains(body, `"nodes":{"status":"ok","detail":"1/1 healthy"}`) {
		t.Errorf("the master is ready without the node agent: %s", body)
	}
	keepsCredentials(t, procs["cubemaster"])
}
