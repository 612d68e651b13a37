package core

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateImageRef(t *testing.T) {
	hex64 := strings.Repeat("0a", 32)
	for _, ref := range []string{
		"alpine", "alpine:3.20", "library/alpine", "docker.io/library/alpine:3.20", "registry.example.com/team/app:v1",
		"registry.example.com:5000/a/b@sha256:" + hex64, "a/b:t@sha512:" + strings.Repeat("b", 128),
		"localhost:5000/x:1", "localhost/x", "127.0.0.1:5000/x", "10.0.0.1/x", "[::1]:5000/x", "MyHost/x", "a.b./c",
		"0_0.0/0", "ocidir:///var/layouts/app:v1", "[64:ff9b::808:808]:5000/x", "[64:ff9b::7f00:1]/x", "[2002:a00:1::]/x",
	} {
		if err := ValidateImageRef(ref); err != nil {
			t.Errorf("%q refused: %v", ref, err)
		}
	}
	for _, tc := range []struct{ ref, reason string }{
		{"", "is required"},
		{strings.Repeat("a", 1025), "longer than 1024"},
		{"/etc/passwd", "not an image reference"},
		{"file:///etc/passwd", `scheme "file" is not allowed`},
		{"ocifile:///tmp/x.tar", `scheme "ocifile"`},
		{"http://evil.example/x", `scheme "http"`},
		{"ocidir://", "needs the layout's path"}, {"user:pw@host://x", "a URL is not an image reference"},
		{"169.254.169.254/latest/meta-data:x", "cloud metadata address"},
		{"169.254.1.1:80/x", "link-local"},
		{"[fd00:ec2::254]:80/x", "cloud metadata address"},
		{"[fe80::1]/x", "link-local"},
		{"100.100.100.200/x", "cloud metadata address"},
		{"0.0.0.0:5000/x", "unspecified"},
		{"metadata.google.internal/x:y", "metadata service"},
		{"metadata:80/x", "metadata service"},
		{"alpine@sha256:abc", "digest must be"},
		{"alpine@md5:" + strings.Repeat("0", 32), "digest must be"},
		{"alpine@sha256:" + strings.ToUpper(hex64), "digest must be"},
		{"user:hunter2@registry.example/x", "user info"},
		{"alpine:latest\n", "whitespace or control"},
		{"alp\x00ine", "whitespace or control"},
		{"regіstry.example/x", "non-ASCII"},
		{"ALPINE", "must be lowercase"},
		{"a/b:" + strings.Repeat("t", 129), "tag must be"},
		{strings.Repeat("a", 252), "longer than 255"},
		{"localhost", "names no repository"},
		{"[::ffff:1.2.3.4]/x", "not an image reference"},
		{"[64:ff9b::a9fe:a9fe]/x", "embedding 169.254.169.254 (NAT64), a cloud metadata address"},
		{"[64:ff9b:1::a9fe:a9fe]:80/x", "(local-use NAT64 /96), a cloud metadata address"},
		{"[2002:a9fe:a9fe::]/x", "(6to4), a cloud metadata address"},
		{"[2001:0:4136:e378:8000:63bf:5601:5601]/x", "(Teredo client), a cloud metadata address"},
		{"[::a9fe:101]:5000/x", "(IPv4-compatible), link-local"},
		{"[::ffff:a9fe:a9fe]/x", "a cloud metadata address"},
		{"[64:ff9b::]/x", "(NAT64), an unspecified"},
	} {
		err := ValidateImageRef(tc.ref)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "source_image_ref" || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("%q: err %v, want a source_image_ref refusal saying %q", tc.ref, err, tc.reason)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: the refusal repeats the credentials: %v", tc.ref, err)
		}
	}
}

func TestNormalizeFromImageRequestLimits(t *testing.T) {
	ok := func() *FromImageRequest {
		return &FromImageRequest{SourceImageRef: "alpine", WritableLayerSize: "20Gi", TemplateID: "tpl-1"}
	}
	for _, tc := range []struct {
		name  string
		edit  func(*FromImageRequest)
		field string
	}{
		{"long request id", func(r *FromImageRequest) { r.RequestID = strings.Repeat("r", 129) }, "requestID"},
		{"request id with a newline", func(r *FromImageRequest) { r.RequestID = "a\nb" }, "requestID"},
		{"zero size", func(r *FromImageRequest) { r.WritableLayerSize = "0" }, "writable_layer_size"},
		{"zero Gi", func(r *FromImageRequest) { r.WritableLayerSize = "0.0Gi" }, "writable_layer_size"},
		{"huge size", func(r *FromImageRequest) { r.WritableLayerSize = "99999999999999999999Ti" }, "writable_layer_size"},
		{"over 1 PiB", func(r *FromImageRequest) { r.WritableLayerSize = "1025Ti" }, "writable_layer_size"},
		{"long instance type", func(r *FromImageRequest) { r.InstanceType = strings.Repeat("i", 65) }, "instance_type"},
		{"instance type with a space", func(r *FromImageRequest) { r.InstanceType = "cube box" }, "instance_type"},
		{"network type NUL", func(r *FromImageRequest) { r.NetworkType = "tap\x00" }, "network_type"},
		{"long platform", func(r *FromImageRequest) { r.Platform = "linux/" + strings.Repeat("a", 64) }, "platform"},
		{"scope entry with a control character", func(r *FromImageRequest) { r.DistributionScope = []string{"n\x01"} }, "distribution_scope"},
		{"long scope entry", func(r *FromImageRequest) { r.DistributionScope = []string{strings.Repeat("n", 257)} }, "distribution_scope"},
		{"too many scope entries", func(r *FromImageRequest) { r.DistributionScope = make([]string, 1025) }, "distribution_scope"},
		{"alias with a leading dash", func(r *FromImageRequest) { r.Alias = "-web" }, "alias"},
		{"alias with a trailing dash", func(r *FromImageRequest) { r.Alias = "web-" }, "alias"},
	} {
		r := ok()
		tc.edit(r)
		_, err := NormalizeFromImageRequest(r, nil)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: err %v, want a refusal of %s", tc.name, err, tc.field)
		}
	}
	r := ok()
	r.WritableLayerSize, r.DistributionScope = "1024Ti", []string{" node-1 "}
	if _, err := NormalizeFromImageRequest(r, nil); err != nil || r.DistributionScope[0] != "node-1" {
		t.Fatalf("the largest size and a padded scope entry: %v %q", err, r.DistributionScope)
	}
}

func TestParseImageRef(t *testing.T) {
	dg := "sha256:" + strings.Repeat("0a", 32)
	for _, tc := range []struct {
		ref  string
		want ImageRef
	}{
		{"alpine", ImageRef{Registry: "docker.io", Repository: "library/alpine", Tag: "latest"}},
		{"index.docker.io/user/app:v2", ImageRef{Registry: "docker.io", Repository: "user/app", Tag: "v2"}},
		{"registry-1.docker.io/alpine@" + dg, ImageRef{Registry: "docker.io", Repository: "library/alpine", Digest: dg}},
		{"localhost/x", ImageRef{Registry: "localhost", Repository: "x", Tag: "latest"}},
		{"[::1]:5000/a/b:t@" + dg, ImageRef{Registry: "[::1]:5000", Repository: "a/b", Tag: "t", Digest: dg}},
		{"MyHost/x", ImageRef{Registry: "MyHost", Repository: "x", Tag: "latest"}},
		// Addresses are the egress policy's to judge, not the grammar's.
		{"169.254.169.254/latest/meta-data:x", ImageRef{Registry: "169.254.169.254", Repository: "latest/meta-data", Tag: "x"}},
		{"ocidir:///var/layouts/app", ImageRef{LayoutPath: "/var/layouts/app"}},
		{"ocidir://rel/app:v1@" + dg, ImageRef{LayoutPath: "rel/app", Tag: "v1", Digest: dg}},
	} {
		got, err := ParseImageRef(tc.ref)
		if err != nil || got != tc.want {
			t.Errorf("ParseImageRef(%q) = %+v, %v; want %+v", tc.ref, got, err, tc.want)
		}
		if got.IsLocalLayout() != strings.HasPrefix(tc.ref, "ocidir://") {
			t.Errorf("%q: IsLocalLayout = %v", tc.ref, got.IsLocalLayout())
		}
	}
	for _, tc := range []struct{ ref, reason string }{
		{"ocidir://", "needs the layout's path"},
		{"ocidir://:v1", "needs the layout's path"},
		{"ocidir:///a#b", "path may hold only"},
		{"ocidir:///a:", "tag must be"},
		{"ocidir:///a@sha256:abc", "digest must be"},
		{"ALPINE", "must be lowercase"},
		{"user:hunter2@registry.example/x", "user info"},
	} {
		_, err := ParseImageRef(tc.ref)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "source_image_ref" || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("%q: err %v, want a source_image_ref refusal saying %q", tc.ref, err, tc.reason)
		}
	}
}
