package control_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/control"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the generated request:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func goldenRef() core.NodeArtifact {
	fp := strings.Repeat("a1", 32) // the goldens name this fingerprint
	aid := aidOf(fp)
	return core.NodeArtifact{
		ArtifactID: aid, Fingerprint: fp, SHA256: shaExt4, SizeBytes: 134217728, Token: "tok-7",
		DownloadURL: core.DownloadURL("master:8089", aid, "tok-7"),
	}
}

var goldenImage = core.ImageConfig{
	Entrypoint: []string{"/docker-entrypoint.sh"}, Cmd: []string{"nginx", "-g", "daemon off;"},
	Env: []string{"PATH=/usr/local/bin:/usr/bin", "NGINX_VERSION=1.27", "EMPTY="}, WorkingDir: "/srv", User: "nginx",
}

func TestGeneratedRequestGolden(t *testing.T) {
	allow := false
	tests := []struct {
		file string
		req  *core.FromImageRequest
	}{
		{"generated_request_defaults.golden.json", &core.FromImageRequest{
			TemplateID: "tpl-0123456789abcdef01234567", SourceImageRef: "nginx:1.27", WritableLayerSize: "20Gi",
			InstanceType: "cubebox", NetworkType: "tap", ExposedPorts: []int32{80, 8080},
		}},
		{"generated_request_overrides.golden.json", &core.FromImageRequest{
			TemplateID: "tpl-override", SourceImageRef: "nginx:1.27", WritableLayerSize: "1536Mi",
			InstanceType: "cubebox", NetworkType: "tap",
			CubeVSContext: &core.CubeVSContext{AllowInternetAccess: &allow, AllowOut: []string{"10.0.0.0/8"}},
			ContainerOverrides: &core.ContainerOverrides{
				Command: []string{"/bin/sh"}, Args: []string{"-c", "exec nginx"}, WorkingDir: "/app",
				Envs:            []*core.KeyValue{{Key: "MODE", Value: "prod"}},
				DNSConfig:       &core.DNSConfig{Servers: []string{"1.1.1.1"}},
				Resources:       &core.Resource{CPU: "4000m", Mem: "8Gi"},
				SecurityContext: json.RawMessage(`{"privileged":false,"readonly_rootfs":true}`),
				Probe:           json.RawMessage(`{"probe_handler":{"http_get":{"path":"/health","port":8080}},"timeout_ms":30000}`),
				Annotations:     map[string]string{"cube.master.inject_envd": "true", "team": "web"},
				VolumeMounts:    json.RawMessage(`[{"name":"data","container_path":"/data","readonly":true}]`),
				RLimit:          &core.RLimit{NoFile: 4096},
			},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			gen, err := control.GenerateSandboxRequest(tc.req, goldenRef(), goldenImage)
			if err != nil {
				t.Fatal(err)
			}
			gen.RequestID = "job-1"
			b, err := json.MarshalIndent(gen, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.file, append(b, '\n'))

			// Same input, same bytes.
			again, _ := control.GenerateSandboxRequest(tc.req, goldenRef(), goldenImage)
			again.RequestID = "job-1"
			b2, _ := json.MarshalIndent(again, "", "  ")
			if !bytes.Equal(b, b2) {
				t.Error("generation is not deterministic")
			}

			stored := control.StoredRequest(gen)
			if stored.RequestID != "" || stored.Annotations[core.AnnotationAppSnapshotCreate] != "" {
				t.Errorf("stored request keeps request id or create annotation: %+v", stored)
			}
			if gen.Annotations[core.AnnotationAppSnapshotCreate] != "true" {
				t.Error("StoredRequest modified the generated request")
			}
		})
	}
}

func TestGeneratedRequestUsesThisTemplatesRequest(t *testing.T) {
	// Two templates sharing one artifact get requests naming themselves
	// (upstream redo reused the first template's generated request).
	a, _ := control.GenerateSandboxRequest(&core.FromImageRequest{TemplateID: "tpl-a", WritableLayerSize: "1Gi"}, goldenRef(), goldenImage)
	b, _ := control.GenerateSandboxRequest(&core.FromImageRequest{TemplateID: "tpl-b", WritableLayerSize: "1Gi"}, goldenRef(), goldenImage)
	eq(t, "a", a.Annotations[core.AnnotationTemplateID], "tpl-a")
	eq(t, "b", b.Annotations[core.AnnotationTemplateID], "tpl-b")
}

func TestGeneratedRequestIvshmemAndBackend(t *testing.T) {
	on := true
	req := &core.FromImageRequest{TemplateID: "tpl-a", WritableLayerSize: "1Gi", EnableIvshmem: &on, Backend: core.BackendS3}
	gen, err := control.GenerateSandboxRequest(req, goldenRef(), goldenImage)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "ivshmem annotation", gen.Annotations[core.AnnotationEnableIvshmem], "true")
	eq(t, "backend", gen.Backend, core.BackendS3)
	eq(t, "stored request keeps it", control.StoredRequest(gen).Annotations[core.AnnotationEnableIvshmem], "true")

	plain, _ := control.GenerateSandboxRequest(&core.FromImageRequest{TemplateID: "tpl-a", WritableLayerSize: "1Gi"}, goldenRef(), goldenImage)
	if _, ok := plain.Annotations[core.AnnotationEnableIvshmem]; ok || plain.Backend != "" {
		t.Errorf("a request without the flags got %v / backend %q", plain.Annotations, plain.Backend)
	}
}

func TestGenerateSandboxRequestRejects(t *testing.T) {
	for name, req := range map[string]*core.FromImageRequest{
		"nil":          nil,
		"no template":  {WritableLayerSize: "1Gi"},
		"mount over /": {TemplateID: "t", ContainerOverrides: &core.ContainerOverrides{VolumeMounts: json.RawMessage(`[{"container_path":" / "}]`)}},
		"bad mounts":   {TemplateID: "t", ContainerOverrides: &core.ContainerOverrides{VolumeMounts: json.RawMessage(`{"a":1}`)}},
		"bad security": {TemplateID: "t", ContainerOverrides: &core.ContainerOverrides{SecurityContext: json.RawMessage(`"x"`)}},
	} {
		if _, err := control.GenerateSandboxRequest(req, goldenRef(), goldenImage); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestQuantityToGi(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"20Gi", 20, true}, {"20G", 20, true}, {"20g", 20, true}, {"20", 20, true},
		{"1024Mi", 1, true}, {"1025Mi", 2, true}, {"512Mi", 1, true}, {"1536M", 2, true},
		{"1Ti", 1024, true}, {"1.5Gi", 2, true}, {"1048576Ki", 1, true},
		{"", 0, false}, {"lots", 0, false}, {"-1Gi", 0, false},
	}
	for _, tc := range tests {
		got, ok := control.QuantityToGi(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("QuantityToGi(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestDownloadURL(t *testing.T) {
	tests := []struct{ base, want string }{
		{"http://m:8089", "http://m:8089/cube/template/artifact/download?artifact_id=rfs-1&token=a%2Bb"},
		{"m:8089/", "http://m:8089/cube/template/artifact/download?artifact_id=rfs-1&token=a%2Bb"},
		{"https://m", "https://m/cube/template/artifact/download?artifact_id=rfs-1&token=a%2Bb"},
	}
	for _, tc := range tests {
		if got := core.DownloadURL(tc.base, "rfs-1", "a+b"); got != tc.want {
			t.Errorf("DownloadURL(%q) = %s", tc.base, got)
		}
	}
	if !strings.HasPrefix(core.DownloadPath, "/") {
		t.Error("download path must be absolute")
	}
}

func TestComposeImageInfo(t *testing.T) {
	tests := []struct{ ref, digest, want string }{
		{"nginx:latest", "nginx@sha256:abc", "nginx:latest@sha256:abc"},
		{"nginx:latest", "sha256:abc", "nginx:latest@sha256:abc"},
		{"nginx:latest", "", "nginx:latest"},
		{"", "sha256:abc", "sha256:abc"},
	}
	for _, tc := range tests {
		if got := control.ComposeImageInfo(tc.ref, tc.digest); got != tc.want {
			t.Errorf("ComposeImageInfo(%q, %q) = %q, want %q", tc.ref, tc.digest, got, tc.want)
		}
	}
}
