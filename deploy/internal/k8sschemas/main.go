// Command k8sschemas writes the JSON schemas deploy's tests validate the
// Helm chart against, in the layout kubeconform reads
// (<version>-standalone-strict/<kind>[-<group>]-<version>.json), from
// Kubernetes' own OpenAPI document, so the tests need no network:
//
//	go mod download k8s.io/kubernetes@v1.37.2
//	go run ./deploy/internal/k8sschemas \
//	    -swagger "$(go env GOMODCACHE)/k8s.io/kubernetes@v1.37.2/api/openapi-spec/swagger.json" \
//	    -version v1.37.2 -out deploy/testdata/kubernetes-json-schema
//
// The schemas are what kubeconform's "standalone-strict" flavour holds:
// every reference inlined; IntOrString a string or an integer, Quantity a
// string or a number; apiVersion and kind pinned to the type's; objects
// refuse properties they do not declare; fields that are not required may
// be null. Descriptions are left out to keep the files small.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// kinds are the resources the chart renders.
var kinds = []gvk{
	{"apps", "v1", "Deployment"},
	{"", "v1", "Service"},
	{"", "v1", "Secret"},
	{"", "v1", "PersistentVolumeClaim"},
}

type gvk struct{ Group, Version, Kind string }

func (k gvk) apiVersion() string {
	if k.Group == "" {
		return k.Version
	}
	return k.Group + "/" + k.Version
}

// file is kubeconform's name for the kind's schema.
func (k gvk) file() string {
	name := strings.ToLower(k.Kind)
	if k.Group != "" {
		name += "-" + strings.ToLower(strings.Split(k.Group, ".")[0])
	}
	return name + "-" + k.Version + ".json"
}

func main() {
	swagger := flag.String("swagger", "", "Kubernetes' api/openapi-spec/swagger.json")
	version := flag.String("version", "", "the Kubernetes version it describes, e.g. v1.37.2")
	out := flag.String("out", "", "directory to write <version>-standalone-strict/ into")
	flag.Parse()
	if err := run(*swagger, *version, *out); err != nil {
		fmt.Fprintln(os.Stderr, "k8sschemas:", err)
		os.Exit(1)
	}
}

func run(swagger, version, out string) error {
	if swagger == "" || version == "" || out == "" {
		return fmt.Errorf("-swagger, -version and -out are required")
	}
	b, err := os.ReadFile(swagger)
	if err != nil {
		return err
	}
	var doc struct {
		Definitions map[string]map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("%s: %w", swagger, err)
	}
	dir := filepath.Join(out, version+"-standalone-strict")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, k := range kinds {
		name, def, err := find(doc.Definitions, k)
		if err != nil {
			return err
		}
		s, err := expand(doc.Definitions, def, []string{name})
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		props := s["properties"].(map[string]any)
		props["apiVersion"] = map[string]any{"type": []any{"string", "null"}, "enum": []any{k.apiVersion()}}
		props["kind"] = map[string]any{"type": []any{"string", "null"}, "enum": []any{k.Kind}}
		s["$schema"] = "http://json-schema.org/schema#"
		s["x-generated-from"] = filepath.Base(swagger) + " of Kubernetes " + version + " by deploy/internal/k8sschemas"
		data, err := json.MarshalIndent(s, "", " ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, k.file()), append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// find returns the definition whose x-kubernetes-group-version-kind names k.
func find(defs map[string]map[string]any, k gvk) (string, map[string]any, error) {
	for name, d := range defs {
		list, _ := d["x-kubernetes-group-version-kind"].([]any)
		for _, e := range list {
			m, _ := e.(map[string]any)
			if m["group"] == k.Group && m["version"] == k.Version && m["kind"] == k.Kind {
				return name, d, nil
			}
		}
	}
	return "", nil, fmt.Errorf("no definition of %s %s", k.apiVersion(), k.Kind)
}

const (
	intOrString = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
	quantity    = "io.k8s.apimachinery.pkg.api.resource.Quantity"
)

// expand returns a copy of schema with every $ref inlined, the
// kubeconform rules applied and descriptions dropped. path holds the
// definitions being inlined, to refuse a cycle.
func expand(defs map[string]map[string]any, schema map[string]any, path []string) (map[string]any, error) {
	if ref, ok := schema["$ref"].(string); ok {
		name := strings.TrimPrefix(ref, "#/definitions/")
		switch name {
		case intOrString:
			return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}, nil
		case quantity:
			return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "number"}}}, nil
		}
		if slices.Contains(path, name) {
			return nil, fmt.Errorf("reference cycle through %s", strings.Join(append(path, name), " -> "))
		}
		def, ok := defs[name]
		if !ok {
			return nil, fmt.Errorf("unknown reference %s", ref)
		}
		return expand(defs, def, append(path, name))
	}
	if schema["format"] == "int-or-string" {
		return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}, nil
	}
	out := map[string]any{}
	for k, v := range schema {
		switch k {
		case "description", "x-kubernetes-group-version-kind":
			continue
		case "properties":
			required := map[string]bool{}
			if list, ok := schema["required"].([]any); ok {
				for _, r := range list {
					required[r.(string)] = true
				}
			}
			props := map[string]any{}
			for name, p := range v.(map[string]any) {
				e, err := expand(defs, p.(map[string]any), path)
				if err != nil {
					return nil, err
				}
				if !required[name] {
					nullable(e)
				}
				props[name] = e
			}
			out[k] = props
		case "items", "additionalProperties":
			if m, ok := v.(map[string]any); ok {
				e, err := expand(defs, m, path)
				if err != nil {
					return nil, err
				}
				out[k] = e
				continue
			}
			out[k] = v
		default:
			out[k] = v
		}
	}
	if _, ok := out["properties"]; ok {
		if _, set := out["additionalProperties"]; !set {
			out["additionalProperties"] = false // strict
		}
		if _, set := out["type"]; !set {
			out["type"] = "object"
		}
	}
	return out, nil
}

// nullable lets a field that is not required be null, as kubeconform's
// schemas do (YAML renders an empty value as null).
func nullable(s map[string]any) {
	if t, ok := s["type"].(string); ok && t != "null" {
		s["type"] = []any{t, "null"}
	}
}
