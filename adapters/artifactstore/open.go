package artifactstore

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/gcsblob" // registers gs:// on blob.DefaultURLMux
	"gocloud.dev/blob/memblob"

	"github.com/cubesandbox/templatecenter/core"
)

// storeURL is a parsed store URL.
type storeURL struct {
	scheme string
	prefix string
	// file://
	dir       string
	createDir bool
	fileMode  os.FileMode
	// s3://
	s3 S3Config
	// gs://: the bucket URL handed to gcsblob, prefix removed
	gsURL string
}

// secretParams are query parameters that would put secrets into a URL.
var secretParams = []string{"access_key", "secret_key", "access_key_id", "secret_access_key",
	"session_token", "token", "password", "private_key"}

// Open opens the store a URL names:
//
//	file:///abs/dir[?create_dir=true][&file_mode=0640][&prefix=p]
//	s3://bucket?endpoint=host:port&region=r&use_path_style=true&disable_https=true[&prefix=p]
//	gs://bucket[?prefix=p][&gcsblob parameters]
//	mem://[?prefix=p]
//
// s3:// takes credentials from the standard AWS chain (AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, shared config, instance role); URLs carrying
// credentials are refused. gs:// uses Application Default Credentials. Errors
// show the URL without its query and user info.
func Open(ctx context.Context, rawURL string) (*Store, error) {
	su, err := parseStoreURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("open artifact store %s: %w", redactURLString(rawURL), err)
	}
	s, err := su.open(ctx)
	if err != nil {
		return nil, fmt.Errorf("open artifact store %s: %w", redactURLString(rawURL), err)
	}
	return s, nil
}

func (su *storeURL) open(ctx context.Context) (*Store, error) {
	switch su.scheme {
	case BackendFile:
		db, err := openDir(su.dir, su.createDir, su.fileMode)
		if err != nil {
			return nil, err
		}
		return &Store{kind: BackendFile, prefix: su.prefix, be: db}, nil
	case BackendMem:
		return &Store{kind: BackendMem, prefix: su.prefix, be: &bucketBackend{b: memblob.OpenBucket(nil), partSize: DefaultPartSize}}, nil
	case BackendS3:
		bb, prefix, err := openS3Bucket(ctx, su.s3)
		if err != nil {
			return nil, err
		}
		return &Store{kind: BackendS3, prefix: prefix, be: bb}, nil
	case BackendGCS:
		b, err := blob.OpenBucket(ctx, su.gsURL)
		if err != nil {
			return nil, fmt.Errorf("open gcs bucket: %w", err)
		}
		return &Store{kind: BackendGCS, prefix: su.prefix, be: &bucketBackend{b: b, partSize: DefaultPartSize, canSign: true}}, nil
	}
	return nil, fmt.Errorf("scheme %q: %w", su.scheme, core.ErrUnsupported)
}

func parseStoreURL(raw string) (*storeURL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error quotes the whole URL; say only that it is malformed.
		return nil, &core.FieldError{Field: "url", Reason: "not a valid URL"}
	}
	if u.User != nil {
		return nil, &core.FieldError{Field: "url", Reason: noCredentialsInURL}
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		// Query errors quote the offending text; keep it out of messages.
		return nil, &core.FieldError{Field: "url", Reason: "malformed query"}
	}
	for name := range q {
		if slices.Contains(secretParams, strings.ToLower(name)) {
			return nil, &core.FieldError{Field: "url", Reason: noCredentialsInURL}
		}
	}
	su := &storeURL{scheme: u.Scheme}
	if su.prefix, err = normalizePrefix(q.Get("prefix")); err != nil {
		return nil, err
	}
	q.Del("prefix")
	if p := strings.Trim(u.Path, "/"); p != "" && (u.Scheme == BackendS3 || u.Scheme == BackendGCS) {
		// Dropped, the path would put the objects at the bucket's root,
		// beside those of any other deployment sharing the bucket.
		return nil, &core.FieldError{Field: "url", Reason: fmt.Sprintf("%s://%s/%s: a folder in the bucket is given as ?prefix=%s, not as a path", u.Scheme, u.Host, p, p)}
	}
	switch u.Scheme {
	case BackendFile:
		return su, su.parseFile(u, q)
	case BackendMem:
		return su, onlyParams(q)
	case BackendS3:
		return su, su.parseS3(u, q)
	case BackendGCS:
		if u.Host == "" {
			return nil, &core.FieldError{Field: "url", Reason: "gs:// needs a bucket name as host"}
		}
		su.gsURL = (&url.URL{Scheme: BackendGCS, Host: u.Host, RawQuery: q.Encode()}).String()
		return su, nil
	case "":
		return nil, &core.FieldError{Field: "url", Reason: "missing scheme (want file://, s3://, gs:// or mem://)"}
	}
	return nil, &core.FieldError{Field: "url", Reason: fmt.Sprintf("scheme %q is not one of file, s3, gs, mem", u.Scheme)}
}

func (su *storeURL) parseFile(u *url.URL, q url.Values) error {
	if u.Host != "" && u.Host != "localhost" {
		return &core.FieldError{Field: "url", Reason: "file:// URLs name a local directory (file:///abs/dir)"}
	}
	dir := filepath.FromSlash(u.Path)
	if !filepath.IsAbs(dir) {
		return &core.FieldError{Field: "url", Reason: "file:// needs an absolute directory path"}
	}
	su.dir = filepath.Clean(dir)
	var err error
	if su.createDir, err = boolParam(q, "create_dir"); err != nil {
		return err
	}
	if su.fileMode, err = ParseFileMode(q.Get("file_mode")); err != nil {
		return &core.FieldError{Field: "file_mode", Reason: err.Error()}
	}
	q.Del("file_mode")
	return onlyParams(q)
}

func (su *storeURL) parseS3(u *url.URL, q url.Values) error {
	if u.Host == "" {
		return &core.FieldError{Field: "url", Reason: "s3:// needs a bucket name as host"}
	}
	su.s3 = S3Config{Bucket: u.Host, Endpoint: q.Get("endpoint"), Region: q.Get("region"), Prefix: su.prefix, UseSSL: true}
	q.Del("endpoint")
	q.Del("region")
	var err error
	if su.s3.UsePathStyle, err = boolParam(q, "use_path_style"); err != nil {
		return err
	}
	noTLS, err := boolParam(q, "disable_https")
	if err != nil {
		return err
	}
	su.s3.UseSSL = !noTLS
	if noTLS && strings.HasPrefix(su.s3.Endpoint, "https://") {
		return &core.FieldError{Field: "url", Reason: "disable_https=true contradicts an https:// endpoint"}
	}
	return onlyParams(q)
}

// boolParam reads and removes a boolean query parameter (absent: false).
func boolParam(q url.Values, name string) (bool, error) {
	v := q.Get(name)
	q.Del(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, &core.FieldError{Field: "url", Reason: fmt.Sprintf("parameter %s=%q is not a boolean", name, v)}
	}
	return b, nil
}

// onlyParams fails on parameters left over after parsing, naming them, so a
// typo does not silently fall back to a default.
func onlyParams(q url.Values) error {
	if len(q) == 0 {
		return nil
	}
	names := slices.Sorted(maps.Keys(q))
	return &core.FieldError{Field: "url", Reason: "unknown parameter(s) " + strings.Join(names, ", ")}
}

// redactURLString shows a store URL without user info and query, the places
// where secrets could hide.
func redactURLString(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<malformed URL>"
	}
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}
	s := r.String()
	if u.RawQuery != "" {
		s += "?<redacted>"
	}
	return s
}

// ParseFileMode reads the permission of a file store's objects: octal
// permission bits ("0640", "640"), never writable by others; "" is
// DefaultFileMode. Objects need at least the owner's read and write.
func ParseFileMode(v string) (os.FileMode, error) {
	if v = strings.TrimSpace(v); v == "" {
		return DefaultFileMode, nil
	}
	n, err := strconv.ParseUint(v, 8, 32)
	switch {
	case err != nil || n > 0o777:
		return 0, fmt.Errorf("%q is not octal permission bits such as 0640", v)
	case n&0o600 != 0o600:
		return 0, fmt.Errorf("%s leaves the owner (this service) unable to read or write its objects; want at least 0600", v)
	case n&0o002 != 0:
		return 0, fmt.Errorf("%s lets everyone write the objects; want at most 0644", v)
	}
	return os.FileMode(n), nil
}
