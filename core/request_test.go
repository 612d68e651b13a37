package core_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
)

const testHex = "0123456789abcdef0123456789abcdef"

func fixedHex() string { return testHex }

func validRequest() *core.FromImageRequest {
	return &core.FromImageRequest{
		RequestID:         "req-1",
		SourceImageRef:    "docker.io/library/nginx:1.27",
		RegistryUsername:  "bob",
		RegistryPassword:  "s3cret",
		WritableLayerSize: "20Gi",
	}
}

func TestNormalizeFromImageRequestDefaults(t *testing.T) {
	req := validRequest()
	req.SourceImageRef = "  docker.io/library/nginx:1.27\t"
	req.WritableLayerSize = " 20Gi "
	req.DistributionScope = []string{" node-a ", "10.0.0.2"}
	if _, err := core.NormalizeFromImageRequest(req, fixedHex); err != nil {
		t.Fatal(err)
	}
	want := validRequest()
	want.TemplateID = "tpl-" + testHex[:24]
	want.InstanceType = core.DefaultInstanceType
	want.NetworkType = core.DefaultNetworkType
	want.Platform = core.DefaultPlatform
	want.DistributionScope = []string{"node-a", "10.0.0.2"}
	if !reflect.DeepEqual(req, want) {
		t.Errorf("got  %+v\nwant %+v", req, want)
	}
	if !strings.HasPrefix(req.TemplateID, "tpl-") || len(req.TemplateID) != len("tpl-")+24 {
		t.Errorf("generated template id %q, want tpl- + 24 hex", req.TemplateID)
	}
}

func TestNormalizeFromImageRequestKeepsGivenValues(t *testing.T) {
	req := validRequest()
	req.TemplateID = "  my.template_1-x "
	req.InstanceType = "gpu"
	req.NetworkType = "vpc"
	req.Platform = "linux/arm64/v8"
	req.Alias = "web-app"
	if _, err := core.NormalizeFromImageRequest(req, func() string { t.Fatal("generator called although an id was given"); return "" }); err != nil {
		t.Fatal(err)
	}
	if req.TemplateID != "my.template_1-x" || req.InstanceType != "gpu" || req.NetworkType != "vpc" || req.Platform != "linux/arm64/v8" || req.Alias != "web-app" {
		t.Errorf("normalize changed given values: %+v", req)
	}
}

func TestNormalizePorts(t *testing.T) {
	tests := []struct {
		name    string
		in      []int32
		want    []int32
		wantErr bool
	}{
		{"none", nil, nil, false},
		{"empty slice", []int32{}, nil, false},
		{"sorted and deduplicated", []int32{443, 80, 22, 80, 443}, []int32{22, 80, 443}, false},
		{"reserved ports do not count", []int32{8080, 22, 32000, 80, 443, 8080}, []int32{22, 80, 443, 8080, 32000}, false},
		{"duplicates count once", []int32{1, 1, 2, 2, 3, 3}, []int32{1, 2, 3}, false},
		{"four custom ports", []int32{1, 2, 3, 4}, nil, true},
		{"four custom ports among reserved", []int32{8080, 32000, 10, 11, 12, 13}, nil, true},
		{"zero", []int32{0}, nil, true},
		{"negative", []int32{-80}, nil, true},
		{"too high", []int32{65536}, nil, true},
		{"bounds", []int32{65535, 1}, []int32{1, 65535}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := validRequest()
			req.ExposedPorts = tc.in
			_, err := core.NormalizeFromImageRequest(req, fixedHex)
			if tc.wantErr {
				var fe *core.FieldError
				if !errors.As(err, &fe) || fe.Field != "exposed_ports" {
					t.Fatalf("got %v, want a FieldError on exposed_ports", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(req.ExposedPorts, tc.want) {
				t.Errorf("ports = %v, want %v", req.ExposedPorts, tc.want)
			}
		})
	}
	in := []int32{443, 80}
	req := validRequest()
	req.ExposedPorts = in
	if _, err := core.NormalizeFromImageRequest(req, fixedHex); err != nil {
		t.Fatal(err)
	}
	if in[0] != 443 {
		t.Error("normalize sorted the caller's slice in place")
	}
}

func TestNormalizeBackendAndIvshmem(t *testing.T) {
	on, off := true, false
	tests := []struct {
		backend, wantBackend string
		ivshmem              *bool
		wantIvshmem          bool
	}{
		{"", "", nil, false},
		{"S3", core.BackendS3, &on, true},
		{"cubecow", core.BackendXFS, &off, false},
	}
	for _, tc := range tests {
		req := validRequest()
		req.Backend, req.EnableIvshmem = tc.backend, tc.ivshmem
		if _, err := core.NormalizeFromImageRequest(req, fixedHex); err != nil {
			t.Fatal(err)
		}
		if req.Backend != tc.wantBackend || (req.EnableIvshmem != nil) != tc.wantIvshmem {
			t.Errorf("backend %q ivshmem %v: got %q %v", tc.backend, tc.ivshmem, req.Backend, req.EnableIvshmem)
		}
	}
	// An explicit false is the default and is not stored: the canonical
	// request equals one that never said it.
	a, b := validRequest(), validRequest()
	a.EnableIvshmem = &off
	na, err := core.NormalizeFromImageRequest(a, fixedHex)
	if err != nil {
		t.Fatal(err)
	}
	nb, err := core.NormalizeFromImageRequest(b, fixedHex)
	if err != nil {
		t.Fatal(err)
	}
	ja, _ := core.CanonicalRequestJSON(na)
	jb, _ := core.CanonicalRequestJSON(nb)
	if ja != jb {
		t.Errorf("enable_ivshmem=false changed the stored request:\n%s\n%s", ja, jb)
	}
}

func TestNormalizeFromImageRequestRejects(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*core.FromImageRequest)
		field  string
	}{
		{"no image", func(r *core.FromImageRequest) { r.SourceImageRef = "" }, "source_image_ref"},
		{"blank image", func(r *core.FromImageRequest) { r.SourceImageRef = "   " }, "source_image_ref"},
		{"huge image ref", func(r *core.FromImageRequest) { r.SourceImageRef = strings.Repeat("a", 1025) }, "source_image_ref"},
		{"no size", func(r *core.FromImageRequest) { r.WritableLayerSize = "" }, "writable_layer_size"},
		{"size with space", func(r *core.FromImageRequest) { r.WritableLayerSize = "20 Gi" }, "writable_layer_size"},
		{"size with GB", func(r *core.FromImageRequest) { r.WritableLayerSize = "20GB" }, "writable_layer_size"},
		{"negative size", func(r *core.FromImageRequest) { r.WritableLayerSize = "-1Gi" }, "writable_layer_size"},
		{"unit only", func(r *core.FromImageRequest) { r.WritableLayerSize = "Gi" }, "writable_layer_size"},
		{"template id with slash", func(r *core.FromImageRequest) { r.TemplateID = "a/b" }, "template_id"},
		{"template id with space", func(r *core.FromImageRequest) { r.TemplateID = "a b" }, "template_id"},
		{"template id leading dash", func(r *core.FromImageRequest) { r.TemplateID = "-abc" }, "template_id"},
		{"template id leading dot", func(r *core.FromImageRequest) { r.TemplateID = "..x" }, "template_id"},
		{"template id too long", func(r *core.FromImageRequest) { r.TemplateID = strings.Repeat("a", core.MaxTemplateIDLen+1) }, "template_id"},
		{"bad alias", func(r *core.FromImageRequest) { r.Alias = "Web_App" }, "alias"},
		{"alias shaped like an id", func(r *core.FromImageRequest) { r.Alias = "tpl-abc" }, "alias"},
		{"bad platform", func(r *core.FromImageRequest) { r.Platform = "linux" }, "platform"},
		{"platform upper case", func(r *core.FromImageRequest) { r.Platform = "Linux/AMD64" }, "platform"},
		{"empty scope entry", func(r *core.FromImageRequest) { r.DistributionScope = []string{"a", " "} }, "distribution_scope"},
		{"unknown backend", func(r *core.FromImageRequest) { r.Backend = "zfs" }, "backend"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := validRequest()
			tc.mutate(req)
			_, err := core.NormalizeFromImageRequest(req, fixedHex)
			var fe *core.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, core.ErrInvalidArgument) {
				t.Fatalf("got %v, want a FieldError on %s", err, tc.field)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("message %q does not name the field", err)
			}
		})
	}

	if _, err := core.NormalizeFromImageRequest(nil, fixedHex); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("nil request: %v", err)
	}
	if _, err := core.NormalizeFromImageRequest(validRequest(), nil); !errors.Is(err, core.ErrTemplateIDRequired) {
		t.Errorf("no id and no generator: %v, want ErrTemplateIDRequired", err)
	}
	if _, err := core.NormalizeFromImageRequest(validRequest(), func() string { return "abc" }); err == nil {
		t.Error("short generated hex accepted")
	}
}

func TestValidateTemplateID(t *testing.T) {
	for _, id := range []string{"a", "tpl-0123456789abcdef01234567", "My.Template_1-x", "9", strings.Repeat("a", core.MaxTemplateIDLen)} {
		if err := core.ValidateTemplateID(id); err != nil {
			t.Errorf("ValidateTemplateID(%q): %v", id, err)
		}
	}
	if err := core.ValidateTemplateID(""); !errors.Is(err, core.ErrTemplateIDRequired) {
		t.Errorf("empty id: %v", err)
	}
	for _, id := range []string{"_a", "a:b", "ä", "a\n", strings.Repeat("a", core.MaxTemplateIDLen+1)} {
		if err := core.ValidateTemplateID(id); !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("ValidateTemplateID(%q): %v, want ErrInvalidArgument", id, err)
		}
	}
}

func TestValidateAlias(t *testing.T) {
	tests := []struct {
		alias string
		ok    bool
	}{
		{"web", true},
		{"web-app-2", true},
		{"0", true},
		{"-", true},
		{"tpl", true},
		{"rfsx", true},
		{"snapshot", true},
		{"my-tpl-x", true},
		{strings.Repeat("a", core.MaxAliasLen), true},
		{strings.Repeat("a", core.MaxAliasLen+1), false},
		{"", false},
		{"Web", false},
		{"web_app", false},
		{"web.app", false},
		{"web app", false},
		{"wéb", false},
		{"tpl-x", false},
		{"snap-x", false},
		{"rfs-x", false},
		{"tpl-", false},
	}
	for _, tc := range tests {
		err := core.ValidateAlias(tc.alias)
		if tc.ok && err != nil {
			t.Errorf("ValidateAlias(%q): %v", tc.alias, err)
		}
		if !tc.ok && !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("ValidateAlias(%q): %v, want ErrInvalidArgument", tc.alias, err)
		}
	}
}

func TestNormalizeAlias(t *testing.T) {
	tests := []struct {
		name    string
		in      *string
		want    string
		wantErr bool
	}{
		{"absent clears", nil, "", false},
		{"empty clears", strp(""), "", false},
		{"valid kept", strp("web-app"), "web-app", false},
		{"invalid rejected", strp("Web"), "", true},
		{"id-shaped rejected", strp("snap-1"), "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := core.NormalizeAlias(tc.in)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("NormalizeAlias = %q, %v; want %q, err=%v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func richRequest() *core.FromImageRequest {
	allow := true
	r := validRequest()
	r.TemplateID = "tpl-rich"
	r.ExposedPorts = []int32{9000, 8080}
	r.CubeVSContext = &core.CubeVSContext{AllowInternetAccess: &allow, AllowOut: []string{"10.0.0.0/8"}}
	r.DistributionScope = []string{"node-b", "node-a"}
	r.ContainerOverrides = &core.ContainerOverrides{
		Command:     []string{"/bin/sh"},
		Args:        []string{"-c", "serve"},
		Envs:        []*core.KeyValue{{Key: "A", Value: "1"}},
		Annotations: map[string]string{"z": "1", "a": "2", "m": "3"},
		Probe:       json.RawMessage(`{"http_get":{"port":9000}}`),
	}
	return r
}

func TestCanonicalRequestJSON(t *testing.T) {
	a, b := richRequest(), richRequest()
	b.RequestID, b.RegistryPassword, b.Wait = "req-other", "other-secret", true
	na, err := core.NormalizeFromImageRequest(a, fixedHex)
	if err != nil {
		t.Fatal(err)
	}
	nb, err := core.NormalizeFromImageRequest(b, fixedHex)
	if err != nil {
		t.Fatal(err)
	}
	ja, err := core.CanonicalRequestJSON(na)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := core.CanonicalRequestJSON(nb)
	if err != nil {
		t.Fatal(err)
	}
	if ja != jb {
		t.Errorf("equal requests gave different canonical JSON:\n%s\n%s", ja, jb)
	}
	for _, leak := range []string{"s3cret", "other-secret", "registry_password", "requestID", "req-1", `"wait"`} {
		if strings.Contains(ja, leak) {
			t.Errorf("canonical JSON contains %q: %s", leak, ja)
		}
	}
	if r := na.Request(); r.RegistryPassword != "s3cret" || r.RequestID != "req-1" {
		t.Error("CanonicalRequestJSON modified the request")
	}
	for range 20 { // map order must not leak into the key
		if again, _ := core.CanonicalRequestJSON(na); again != ja {
			t.Fatalf("canonical JSON not stable: %s vs %s", again, ja)
		}
	}

	back, err := core.DecodeRequestJSON(ja)
	if err != nil {
		t.Fatal(err)
	}
	want := *a
	want.RegistryPassword, want.RequestID = "", ""
	if !reflect.DeepEqual(back, &want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", back, &want)
	}

	c := richRequest()
	c.WritableLayerSize = "30Gi"
	nc, err := core.NormalizeFromImageRequest(c, fixedHex)
	if err != nil {
		t.Fatal(err)
	}
	if jc, _ := core.CanonicalRequestJSON(nc); jc == ja {
		t.Error("different requests share a canonical JSON")
	}
	if _, err := core.DecodeRequestJSON("{"); err == nil {
		t.Error("DecodeRequestJSON accepted broken JSON")
	}
}

// TestNormalizedRequestIsItsOwn: a NormalizedRequest keeps what was
// normalized: later changes to the caller's request, or to a copy Request
// returns, do not reach it, and the With methods return changed copies.
func TestNormalizedRequestIsItsOwn(t *testing.T) {
	req := richRequest()
	n, err := core.NormalizeFromImageRequest(req, fixedHex)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := core.CanonicalRequestJSON(n)
	req.WritableLayerSize, req.ExposedPorts[0], req.DistributionScope = "1Ti", 1, core.NodeScope{"elsewhere"}
	got := n.Request()
	got.TemplateID = "tpl-other"
	if again, _ := core.CanonicalRequestJSON(n); again != want {
		t.Fatalf("changes after normalizing reached the NormalizedRequest:\n%s\nwant\n%s", again, want)
	}
	c := n.WithCredentials("alice", "pw")
	if r := c.Request(); r.RegistryUsername != "alice" || r.RegistryPassword != "pw" || n.Request().RegistryUsername != "bob" {
		t.Errorf("WithCredentials: %+v (original %+v)", r, n.Request())
	}
	if cj, _ := core.CanonicalRequestJSON(c); cj == want {
		t.Error("the username is part of the canonical request, yet WithCredentials left it unchanged")
	}
	if r, err := n.WithRequestID("req-2"); err != nil || r.Request().RequestID != "req-2" || n.Request().RequestID != "req-1" {
		t.Errorf("WithRequestID: %v", err)
	}
	if _, err := n.WithRequestID("a\nb"); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("WithRequestID took a request id with a newline: %v", err)
	}
	var zero core.NormalizedRequest
	if !zero.IsZero() || zero.Request() != nil || n.IsZero() {
		t.Error("IsZero or Request of the zero value")
	}
	if _, err := core.CanonicalRequestJSON(zero); err == nil {
		t.Error("CanonicalRequestJSON of no request succeeded")
	}
}
