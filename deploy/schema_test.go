package deploy

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/yannh/kubeconform/pkg/validator"
)

// kubernetesVersion is the version whose schemas testdata holds (made by
// deploy/internal/k8sschemas from that release's OpenAPI document).
const kubernetesVersion = "1.37.2"

// schemaLocation is where kubeconform finds them: offline, in testdata,
// laid out as its default registry would be.
const schemaLocation = "testdata/kubernetes-json-schema/{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json"

// TestHelmRendersValidKubernetes validates every document the chart
// renders, in each mode, against the Kubernetes schemas with kubeconform
// in strict mode: an unknown or misspelled field, a wrong type, a missing
// required field or a kind without a schema fails.
func TestHelmRendersValidKubernetes(t *testing.T) {
	v, err := validator.New([]string{schemaLocation}, validator.Opts{Strict: true, KubernetesVersion: kubernetesVersion})
	if err != nil {
		t.Fatal(err)
	}
	dsn := "database.dsn=mysql://u:p@tcp(db:3306)/cube"
	s3 := []string{"--set", dsn, "--set", "artifactStore.s3Backed=true", "--set", "s3.endpoint=http://minio:9000",
		"--set", "s3.bucket=b", "--set", "s3.accessKey=k", "--set", "s3.secretKey=s"}
	modes := map[string][]string{
		"pvc":                {"--set", dsn},
		"pvc with nodes":     {"--set", dsn, "--set", "master.nodes=node-1=10.0.0.1:9999"},
		"s3, three replicas": append(s3, "--set", "master.replicas=3", "--set", "templateCenter.replicas=3"),
		"read-write-many":    {"--set", dsn, "--set", "artifactStore.pvc.accessMode=ReadWriteMany", "--set", "master.replicas=2"},
		"auth off":           {"--set", dsn, "--set", "auth.enabled=false"},
		"existing secrets": {"--set", "database.existingSecret=db", "--set", "callbackToken.existingSecret=tok",
			"--set", "auth.existingSecret=api", "--set", "sealingKeys.existingSecret=seal", "--set", "artifactStore.pvc.existingClaim=claim"},
		"resources": {"--set", dsn, "--set", "master.resources.limits.memory=512Mi", "--set", "templateCenter.resources.requests.cpu=500m"},
	}
	for name, args := range modes {
		t.Run(name, func(t *testing.T) {
			out, err := renderYAML(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[string]int{}
			for _, res := range v.Validate("chart", io.NopCloser(bytes.NewReader(out))) {
				if res.Status == validator.Empty {
					continue
				}
				sig, _ := res.Resource.Signature()
				what := "a document"
				if sig != nil {
					what = fmt.Sprintf("%s %s", sig.Kind, sig.Name)
					kinds[sig.Kind]++
				}
				if res.Status != validator.Valid {
					var msgs []string
					for _, e := range res.ValidationErrors {
						msgs = append(msgs, e.Path+": "+e.Msg)
					}
					t.Errorf("%s is not valid Kubernetes %s: %v %s", what, kubernetesVersion, res.Err, strings.Join(msgs, "; "))
				}
			}
			if kinds["Deployment"] != 2 || kinds["Service"] != 2 {
				t.Errorf("validated %v, want both Deployments and Services", kinds)
			}
		})
	}
}

// TestValidatorRefusesWhatKubernetesWould: the vendored schemas are strict
// enough to matter (a misspelled field and a string where a number goes
// are refused), so a pass above means something.
func TestValidatorRefusesWhatKubernetesWould(t *testing.T) {
	v, err := validator.New([]string{schemaLocation}, validator.Opts{Strict: true, KubernetesVersion: kubernetesVersion})
	if err != nil {
		t.Fatal(err)
	}
	for name, doc := range map[string]string{
		"unknown field": `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"x"},"spec":{"selector":{},"template":{"spec":{"containers":[{"name":"c","image":"i","securityContex":{}}]}}}}`,
		"wrong type":    `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"x"},"spec":{"selector":{},"template":{"spec":{"securityContext":{"fsGroup":"nobody"},"containers":[{"name":"c","image":"i"}]}}}}`,
		"missing field": `{"apiVersion":"v1","kind":"Service","metadata":{"name":"x"},"spec":{"ports":[{"name":"http"}]}}`,
		"no schema":     `{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"x"}}`,
	} {
		for _, res := range v.Validate(name, io.NopCloser(strings.NewReader(doc))) {
			if res.Status == validator.Valid {
				t.Errorf("%s: accepted %s", name, doc)
			}
		}
	}
}

// TestVendoredSchemasMatchTheirSource regenerates the schemas from
// Kubernetes' OpenAPI document when its module is in the module cache
// (go mod download k8s.io/kubernetes@v1.37.2) and compares: the files in
// testdata are what deploy/internal/k8sschemas makes, nothing edited.
func TestVendoredSchemasMatchTheirSource(t *testing.T) {
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	swagger := filepath.Join(strings.TrimSpace(string(out)), "k8s.io", "kubernetes@v"+kubernetesVersion, "api", "openapi-spec", "swagger.json")
	if _, err := os.Stat(swagger); err != nil {
		t.Skipf("%s is not in the module cache (go mod download k8s.io/kubernetes@v%s to compare)", swagger, kubernetesVersion)
	}
	dir := t.TempDir()
	cmd := exec.Command("go", "run", "./internal/k8sschemas", "-swagger", swagger, "-version", "v"+kubernetesVersion, "-out", dir)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("k8sschemas: %v\n%s", err, b)
	}
	sub := "v" + kubernetesVersion + "-standalone-strict"
	files, err := os.ReadDir(filepath.Join(dir, sub))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		got, _ := os.ReadFile(filepath.Join(dir, sub, f.Name()))
		want, err := os.ReadFile(filepath.Join("testdata", "kubernetes-json-schema", sub, f.Name()))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("testdata %s differs from what k8sschemas makes (%v): regenerate it", f.Name(), err)
		}
	}
}
