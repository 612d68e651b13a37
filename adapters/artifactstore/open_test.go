package artifactstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
)

func TestValidateKeyAccepts(t *testing.T) {
	for _, key := range []string{
		"a",
		"templates/abc/rootfs.ext4",
		"sha256/" + strings.Repeat("ab", 32),
		".hidden",
		"a/..b/c..",
		"with space",
		"ünïcödé/ключ",
		strings.Repeat("k", 255),
		strings.Repeat("a/", 511) + "b", // 1023 bytes
	} {
		if err := ValidateKey(key); err != nil {
			t.Errorf("ValidateKey(%.40q) = %v, want nil", key, err)
		}
	}
}

func TestValidateKeyRejects(t *testing.T) {
	for _, tc := range []struct{ key, reason string }{
		{"", "empty"},
		{"/a", "start with /"},
		{"a/", "end with /"},
		{"a//b", "empty path components"},
		{"a/../b", ". or .."},
		{"./a", ". or .."},
		{"a\\b", "backslash"},
		{"a\tb", "control"},
		{"a\x7fb", "control"},
		{"\xff", "UTF-8"},
		{"dir/.cube-tmp-123", "reserved prefix"},
		{strings.Repeat("k", 256), "component longer"},
		{strings.Repeat("a/", 512) + "b", "longer than 1024"},
	} {
		err := ValidateKey(tc.key)
		var fe *core.FieldError
		if !errors.As(err, &fe) || fe.Field != "key" || !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("ValidateKey(%.40q) = %v, want a *core.FieldError for key", tc.key, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("ValidateKey(%.40q) = %q, want the reason to mention %q", tc.key, err, tc.reason)
		}
	}
}

func TestParseStoreURL(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want storeURL
	}{
		{"file:///srv/artifacts", storeURL{scheme: "file", opener: fileURL{dir: "/srv/artifacts", fileMode: DefaultFileMode}}},
		{"file://localhost/srv/a/../b/?create_dir=1&prefix=/x/y/", storeURL{scheme: "file", opener: fileURL{dir: "/srv/b", createDir: true, fileMode: DefaultFileMode}, prefix: "x/y/"}},
		{"file:///srv/artifacts?file_mode=0644", storeURL{scheme: "file", opener: fileURL{dir: "/srv/artifacts", fileMode: 0o644}}},
		{"mem://", storeURL{scheme: "mem", opener: memURL{}}},
		{"mem://name?prefix=p", storeURL{scheme: "mem", opener: memURL{}, prefix: "p/"}},
		{"s3://bkt?endpoint=127.0.0.1:9000&use_path_style=true&region=eu-west-1&disable_https=true&prefix=cube",
			storeURL{scheme: "s3", prefix: "cube/", opener: s3URL{S3Config{Bucket: "bkt", Endpoint: "127.0.0.1:9000", Region: "eu-west-1", UsePathStyle: true, UseSSL: false}}}},
		{"s3://bkt", storeURL{scheme: "s3", opener: s3URL{S3Config{Bucket: "bkt", UseSSL: true}}}},
		{"gs://bkt?prefix=a/b&access_id=-", storeURL{scheme: "gs", prefix: "a/b/", opener: gsURL("gs://bkt?access_id=-")}},
		{"gs://bkt", storeURL{scheme: "gs", opener: gsURL("gs://bkt")}},
	} {
		got, err := parseStoreURL(tc.url)
		if err != nil {
			t.Errorf("parseStoreURL(%s): %v", tc.url, err)
			continue
		}
		if *got != tc.want {
			t.Errorf("parseStoreURL(%s) =\n %#v\nwant\n %#v", tc.url, *got, tc.want)
		}
	}
}

func TestParseStoreURLRejects(t *testing.T) {
	for _, tc := range []struct{ url, reason string }{
		{"", "missing scheme (want file://, gs://, mem:// or s3://)"},
		{"/srv/artifacts", "missing scheme"},
		{"ftp://host/x", `scheme "ftp" is not one of file, gs, mem, s3`},
		{"file://host/srv", "local directory"},
		{"file://relative", "local directory"},
		{"file:///srv?create_dir=maybe", "create_dir"},
		{"file:///srv?creat_dir=true", "unknown parameter(s) creat_dir"},
		{"file:///srv?prefix=../x", "prefix"},
		{"mem://?color=blue", "unknown parameter(s) color"},
		{"s3://?endpoint=x", "bucket name"},
		{"s3://b?use_path_style=yes", "use_path_style"},
		{"s3://b?endpoint=https://h&disable_https=true", "contradicts"},
		{"s3://b?profile=x&zz=1", "unknown parameter(s) profile, zz"},
		{"gs://?prefix=x", "bucket name"},
		// A folder as a path would be dropped: the objects would land at
		// the bucket's root, beside another deployment's.
		{"s3://b/tenant-a/artifacts?region=r", "?prefix=tenant-a/artifacts"},
		{"gs://b/tenant-a", "?prefix=tenant-a"},
	} {
		_, err := parseStoreURL(tc.url)
		if !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("parseStoreURL(%q) = %v, want an invalid-argument error mentioning %q", tc.url, err, tc.reason)
		}
	}
}

// TestOpenNeverLeaksSecrets feeds URLs that carry a secret in every place a
// careless caller might put one and checks that the error refuses them and
// never repeats the secret.
func TestOpenNeverLeaksSecrets(t *testing.T) {
	const secret = "SUPERSECRETVALUE"
	for _, raw := range []string{
		"s3://bkt?endpoint=127.0.0.1:1&secret_key=" + secret,
		"s3://bkt?endpoint=127.0.0.1:1&access_key=AK&secret_key=" + secret,
		"s3://AK:" + secret + "@bkt?endpoint=127.0.0.1:1",
		"s3://bkt?endpoint=http://AK:" + secret + "@127.0.0.1:1",
		"s3://bkt?AWS_SECRET_ACCESS_KEY=" + secret,
		"gs://bkt?private_key=" + secret,
		"file:///tmp/x?password=" + secret,
		"s3://bkt?endpoint=%zz" + secret,
	} {
		_, err := Open(context.Background(), raw)
		if err == nil {
			t.Errorf("Open(%q) succeeded", raw)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("Open error leaks the secret: %v", err)
		}
	}
}

func TestRedactURLString(t *testing.T) {
	for in, want := range map[string]string{
		"s3://bkt?endpoint=h&secret_key=x": "s3://bkt?<redacted>",
		"s3://u:p@bkt/":                    "s3://bkt/",
		"file:///srv/a":                    "file:///srv/a",
		"%%%":                              "<malformed URL>",
	} {
		if got := redactURLString(in); got != want {
			t.Errorf("redactURLString(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestS3ConfigFromEnv(t *testing.T) {
	full := map[string]string{
		EnvS3Endpoint: "minio:9000", EnvS3Bucket: "b", EnvS3AccessKey: "ak", EnvS3SecretKey: "sk",
		EnvS3Region: "eu", EnvS3UsePathStyle: "true", EnvS3UseSSL: "false", EnvS3Prefix: "cube/artifacts",
	}
	without := func(name string) map[string]string {
		m := map[string]string{}
		for k, v := range full {
			if k != name {
				m[k] = v
			}
		}
		return m
	}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    S3Config
		enabled bool
		err     string
	}{
		{"full", full, S3Config{Endpoint: "minio:9000", Bucket: "b", AccessKey: "ak", SecretKey: "sk", Region: "eu",
			UsePathStyle: true, UseSSL: false, Prefix: "cube/artifacts"}, true, ""},
		{"defaults", map[string]string{EnvS3Endpoint: "e", EnvS3Bucket: "b", EnvS3AccessKey: "a", EnvS3SecretKey: "s"},
			S3Config{Endpoint: "e", Bucket: "b", AccessKey: "a", SecretKey: "s", UseSSL: true}, true, ""},
		{"no secret key", without(EnvS3SecretKey), S3Config{}, false, ""},
		{"no endpoint", without(EnvS3Endpoint), S3Config{}, false, ""},
		{"nothing", map[string]string{}, S3Config{UseSSL: true}, false, ""},
		{"bad bool", map[string]string{EnvS3UseSSL: "sometimes"}, S3Config{}, false, EnvS3UseSSL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, enabled, err := S3ConfigFromEnv(func(k string) string { return tc.env[k] })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one naming %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if enabled != tc.enabled {
				t.Errorf("enabled = %t, want %t", enabled, tc.enabled)
			}
			if tc.enabled && got != tc.want {
				t.Errorf("config = %#v, want %#v", got, tc.want)
			}
		})
	}
}

func TestS3ConfigNeverPrintsSecret(t *testing.T) {
	c := S3Config{Endpoint: "e", Bucket: "b", AccessKey: "AKID", SecretKey: "TOPSECRET"}
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		if s := fmt.Sprintf(f, c); strings.Contains(s, "TOPSECRET") {
			t.Errorf("Sprintf(%q) = %s", f, s)
		}
		if s := fmt.Sprintf(f, &c); strings.Contains(s, "TOPSECRET") {
			t.Errorf("Sprintf(%q, pointer) = %s", f, s)
		}
	}
}

func TestOpenS3RejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg    S3Config
		reason string
	}{
		{S3Config{}, "bucket"},
		{S3Config{Bucket: "b", AccessKey: "a"}, "together"},
		{S3Config{Bucket: "b", PartSize: 1 << 20}, "5 MiB"},
		{S3Config{Bucket: "b", Endpoint: "ftp://h"}, "endpoint"},
		{S3Config{Bucket: "b", Prefix: "a/../b"}, "prefix"},
	} {
		_, err := OpenS3(context.Background(), tc.cfg)
		if !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("OpenS3(%v) = %v, want an invalid-argument error mentioning %q", tc.cfg, err, tc.reason)
		}
	}
}

func TestEndpointURL(t *testing.T) {
	for _, tc := range []struct {
		in   string
		ssl  bool
		want string
	}{
		{"", true, ""},
		{"127.0.0.1:9000", false, "http://127.0.0.1:9000"},
		{"minio.local:9000", true, "https://minio.local:9000"},
		{"http://127.0.0.1:9000", true, "http://127.0.0.1:9000"},
		{"https://s3.example.com", false, "https://s3.example.com"},
	} {
		got, err := endpointURL(tc.in, tc.ssl)
		if err != nil || got != tc.want {
			t.Errorf("endpointURL(%q, %t) = %q, %v; want %q", tc.in, tc.ssl, got, err, tc.want)
		}
	}
}

func TestPartSizeFor(t *testing.T) {
	bb := &bucketBackend{partSize: DefaultPartSize}
	for _, tc := range []struct{ size, want int64 }{
		{0, DefaultPartSize},
		{40 << 20, DefaultPartSize},
		{100 << 30, DefaultPartSize}, // 6400 parts: fits
		{1 << 40, 117 << 20},         // 1 TiB needs bigger parts
	} {
		got := bb.partSizeFor(tc.size)
		if got != tc.want {
			t.Errorf("partSizeFor(%d) = %d, want %d", tc.size, got, tc.want)
		}
		if tc.size/got >= maxParts+1 {
			t.Errorf("partSizeFor(%d) = %d needs %d parts", tc.size, got, tc.size/got)
		}
	}
}
