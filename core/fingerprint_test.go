package core_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
)

// Rewrite the golden files with: go test ./core -run Fingerprint -update
// (only after a deliberate change; a changed fingerprint orphans every
// stored artifact).
var update = flag.Bool("update", false, "rewrite golden files in testdata")

const (
	digestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	digestB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	envdSHA = "1111111111111111111111111111111111111111111111111111111111111111"
)

func baseSpec() core.SpecInput {
	return core.SpecInput{
		SourceImageDigest: digestA,
		WritableLayerSize: "20Gi",
		InstanceType:      core.DefaultInstanceType,
		NetworkType:       core.DefaultNetworkType,
	}
}

// goldenSpecs are the fingerprints pinned in testdata/fingerprints.golden.json.
func goldenSpecs() map[string]core.SpecInput {
	withPorts := baseSpec()
	withPorts.ExposedPorts = []int32{22, 8080, 32000}

	withOverrides := baseSpec()
	withOverrides.ContainerOverrides = &core.ContainerOverrides{
		Command:     []string{"/usr/bin/app"},
		Args:        []string{"--port", "9000"},
		WorkingDir:  "/srv",
		Envs:        []*core.KeyValue{{Key: "MODE", Value: "prod"}},
		DNSConfig:   &core.DNSConfig{Servers: []string{"1.1.1.1"}},
		Resources:   &core.Resource{CPU: "2000m", Mem: "2000Mi"},
		Annotations: map[string]string{"b": "2", "a": "1"},
		RLimit:      &core.RLimit{NoFile: 65536},
	}

	injected := baseSpec()
	injected.CAFingerprint = "ca-fp"
	injected.EnvdSHA256 = envdSHA

	arm := baseSpec()
	arm.Platform = "linux/arm64"

	current := baseSpec()
	current.Platform = core.DefaultPlatform
	current.BuilderFormat = core.BuilderFormatVersion

	return map[string]core.SpecInput{
		"minimal":         baseSpec(),
		"ports":           withPorts,
		"overrides":       withOverrides,
		"injected":        injected,
		"platform-arm64":  arm,
		"builder-format":  current,
		"other-digest-1g": {SourceImageDigest: digestB, WritableLayerSize: "1Gi", InstanceType: "gpu", NetworkType: "vpc"},
	}
}

func TestFingerprintGolden(t *testing.T) {
	path := filepath.Join("testdata", "fingerprints.golden.json")
	got := map[string]string{}
	for name, spec := range goldenSpecs() {
		fp, err := core.Fingerprint(spec)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got[name] = fp
	}
	if *update {
		b, err := json.MarshalIndent(got, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run with -update to create it): %v", err)
	}
	var want map[string]string
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if len(want) != len(got) {
		t.Errorf("golden file has %d entries, the test %d", len(want), len(got))
	}
	for name, fp := range got {
		if want[name] != fp {
			t.Errorf("%s: fingerprint %s, golden %s", name, fp, want[name])
		}
	}
}

// The fingerprint of a default spec must match upstream's: sha256 of the
// JSON of upstream's struct, written out here by hand.
func TestFingerprintMatchesUpstreamShape(t *testing.T) {
	doc := `{"source_image_digest":"` + digestA + `","writable_layer_size":"20Gi","exposed_ports":[22,8080],` +
		`"instance_type":"cubebox","network_type":"tap","container_overrides":{"command":["/bin/app"]},` +
		`"cube_egress_ca_fingerprint":"ca","envd_binary_sha256":"` + envdSHA + `"}`
	sum := sha256.Sum256([]byte(doc))
	spec := baseSpec()
	spec.ExposedPorts = []int32{22, 8080}
	spec.ContainerOverrides = &core.ContainerOverrides{Command: []string{"/bin/app"}}
	spec.CAFingerprint = "ca"
	spec.EnvdSHA256 = envdSHA
	spec.Platform = core.DefaultPlatform
	got, err := core.Fingerprint(spec)
	if err != nil {
		t.Fatal(err)
	}
	if want := hex.EncodeToString(sum[:]); got != want {
		t.Errorf("Fingerprint = %s, want sha256 of upstream's JSON %s", got, want)
	}
}

func normalizedSpec(t *testing.T, mutate func(*core.FromImageRequest)) core.SpecInput {
	t.Helper()
	r := richRequest()
	mutate(r)
	n, err := core.NormalizeFromImageRequest(r, fixedHex)
	if err != nil {
		t.Fatal(err)
	}
	return core.SpecInputFor(n, digestA, "ca-fp", envdSHA, "")
}

func mustFingerprint(t *testing.T, s core.SpecInput) string {
	t.Helper()
	fp, err := core.Fingerprint(s)
	if err != nil {
		t.Fatal(err)
	}
	return fp
}

func TestFingerprintIgnoresExcludedFields(t *testing.T) {
	base := mustFingerprint(t, normalizedSpec(t, func(*core.FromImageRequest) {}))
	tests := []struct {
		name   string
		mutate func(*core.FromImageRequest)
	}{
		{"template id", func(r *core.FromImageRequest) { r.TemplateID = "another-template" }},
		{"generated template id", func(r *core.FromImageRequest) { r.TemplateID = "" }},
		{"alias", func(r *core.FromImageRequest) { r.Alias = "web" }},
		{"registry password", func(r *core.FromImageRequest) { r.RegistryPassword = "different" }},
		{"registry username", func(r *core.FromImageRequest) { r.RegistryUsername = "alice" }},
		{"request id", func(r *core.FromImageRequest) { r.RequestID = "req-9" }},
		{"distribution scope", func(r *core.FromImageRequest) { r.DistributionScope = []string{"node-z"} }},
		{"cubevs context", func(r *core.FromImageRequest) { r.CubeVSContext = nil }},
		{"source image ref (only the digest counts)", func(r *core.FromImageRequest) { r.SourceImageRef = "mirror.local/nginx@" + digestA }},
		{"port order and duplicates", func(r *core.FromImageRequest) { r.ExposedPorts = []int32{8080, 9000, 9000} }},
		{"explicit default platform", func(r *core.FromImageRequest) { r.Platform = core.DefaultPlatform }},
		{"wait", func(r *core.FromImageRequest) { r.Wait = true }},
		{"backend", func(r *core.FromImageRequest) { r.Backend = core.BackendS3 }},
		{"ivshmem", func(r *core.FromImageRequest) { on := true; r.EnableIvshmem = &on }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := mustFingerprint(t, normalizedSpec(t, tc.mutate)); got != base {
				t.Errorf("fingerprint changed: %s vs %s", got, base)
			}
		})
	}
}

func TestFingerprintCoversIncludedFields(t *testing.T) {
	base := normalizedSpec(t, func(*core.FromImageRequest) {})
	baseFP := mustFingerprint(t, base)
	tests := []struct {
		name   string
		mutate func(*core.SpecInput)
	}{
		{"digest", func(s *core.SpecInput) { s.SourceImageDigest = digestB }},
		{"writable layer size", func(s *core.SpecInput) { s.WritableLayerSize = "21Gi" }},
		{"ports", func(s *core.SpecInput) { s.ExposedPorts = []int32{8080} }},
		{"no ports", func(s *core.SpecInput) { s.ExposedPorts = nil }},
		{"instance type", func(s *core.SpecInput) { s.InstanceType = "gpu" }},
		{"network type", func(s *core.SpecInput) { s.NetworkType = "vpc" }},
		{"override command", func(s *core.SpecInput) {
			o := *s.ContainerOverrides
			o.Command = []string{"/bin/bash"}
			s.ContainerOverrides = &o
		}},
		{"override env", func(s *core.SpecInput) {
			o := *s.ContainerOverrides
			o.Envs = []*core.KeyValue{{Key: "A", Value: "2"}}
			s.ContainerOverrides = &o
		}},
		{"no overrides", func(s *core.SpecInput) { s.ContainerOverrides = nil }},
		{"non-default platform", func(s *core.SpecInput) { s.Platform = "linux/arm64" }},
		{"envd sha", func(s *core.SpecInput) { s.EnvdSHA256 = strings.Repeat("2", 64) }},
		{"ca fingerprint", func(s *core.SpecInput) { s.CAFingerprint = "other-ca" }},
		{"builder format", func(s *core.SpecInput) { s.BuilderFormat = "2" }},
		{"builder", func(s *core.SpecInput) { s.Builder = "ext4stream/1" }},
	}
	seen := map[string]string{baseFP: "base"}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			tc.mutate(&s)
			fp := mustFingerprint(t, s)
			if prev, dup := seen[fp]; dup {
				t.Errorf("fingerprint %s equals that of %s", fp, prev)
			}
			seen[fp] = tc.name
		})
	}
}

func TestFingerprintDefaultPlatformEqualsOmitted(t *testing.T) {
	omitted, explicit := baseSpec(), baseSpec()
	explicit.Platform = core.DefaultPlatform
	if a, b := mustFingerprint(t, omitted), mustFingerprint(t, explicit); a != b {
		t.Errorf("default platform %s != omitted %s", b, a)
	}
}

func TestFingerprintRejectsBadDigest(t *testing.T) {
	for _, d := range []string{"", "sha256:abc", "md5:" + strings.Repeat("a", 64), strings.Repeat("a", 71), digestA + "a"} {
		s := baseSpec()
		s.SourceImageDigest = d
		if _, err := core.Fingerprint(s); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("digest %q: %v, want ErrInvalidArgument", d, err)
		}
	}
}

func TestArtifactIDFor(t *testing.T) {
	fp := mustFingerprint(t, baseSpec())
	id, err := core.ArtifactIDFor(fp)
	if err != nil {
		t.Fatal(err)
	}
	if id != "rfs-"+fp[:24] || len(id) != 28 {
		t.Errorf("ArtifactIDFor = %q, want rfs- + first 24 hex of %s", id, fp)
	}
	if _, err := core.ArtifactIDFor("abc"); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("short fingerprint: %v", err)
	}
}
