package artifactstore

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/cubesandbox/templatecenter/core"
)

// storeURL is a parsed store URL.
type storeURL struct {
	scheme string
	prefix string
	opener Opener
}

// secretParams are query parameters that would put secrets into a URL.
var secretParams = []string{"access_key", "secret_key", "access_key_id", "secret_access_key",
	"session_token", "token", "password", "private_key"}

// Open opens the store a URL names, by the Scheme registered for its
// scheme; every kind takes ?prefix=p, a folder its keys are kept under.
// The built-in kinds:
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
	d, err := su.opener.Open(ctx)
	if err != nil {
		return nil, fmt.Errorf("open artifact store %s: %w", redactURLString(rawURL), err)
	}
	return &Store{kind: su.scheme, prefix: su.prefix, be: d}, nil
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
	kinds := Schemes()
	if u.Scheme == "" {
		return nil, &core.FieldError{Field: "url", Reason: fmt.Sprintf("missing scheme (want %s:// or %s://)", strings.Join(kinds[:len(kinds)-1], "://, "), kinds[len(kinds)-1])}
	}
	sc, ok := Lookup(u.Scheme)
	if !ok {
		return nil, &core.FieldError{Field: "url", Reason: fmt.Sprintf("scheme %q is not one of %s", u.Scheme, strings.Join(kinds, ", "))}
	}
	if su.opener, err = sc.Parse(u, q); err != nil {
		return nil, err
	}
	return su, nil
}

// noBucketPath refuses a bucket URL with a path: dropped, the path would
// put the objects at the bucket's root, beside those of any other
// deployment sharing the bucket.
func noBucketPath(u *url.URL) error {
	if p := strings.Trim(u.Path, "/"); p != "" {
		return &core.FieldError{Field: "url", Reason: fmt.Sprintf("%s://%s/%s: a folder in the bucket is given as ?prefix=%s, not as a path", u.Scheme, u.Host, p, p)}
	}
	return nil
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
