package registry

import (
	"errors"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
)

// FuzzParseRef feeds arbitrary references to the parser: it must never
// panic, must refuse every non-registry scheme (local layouts are off), must
// report refusals as field errors on source_image_ref, and must never echo
// the input in its message.
func FuzzParseRef(f *testing.F) {
	for _, s := range []string{
		"alpine", "docker.io/library/alpine:3.20", "127.0.0.1:5000/a/b@sha256:" + strings.Repeat("a", 64),
		"ocidir:///etc/secret:latest", "ocifile://x", "169.254.169.254:80/x", "localhost/x:y",
		"UPPER/case", "a/b:tag@sha256:zz", "host:99999/x", "a//b", "a@sha512:" + strings.Repeat("b", 128),
		"user:pass@host/repo", "reg://host/repo", "",
	} {
		f.Add(s)
	}
	s := &Source{opts: Options{}}
	f.Fuzz(func(t *testing.T, raw string) {
		r, err := s.parseRef(raw)
		if err != nil {
			var fe *core.FieldError
			if !errors.As(err, &fe) || fe.Field != "source_image_ref" || !errors.Is(err, core.ErrInvalidArgument) {
				t.Fatalf("%q: refusal %v is not a field error on source_image_ref", raw, err)
			}
			if len(raw) >= 8 && strings.Contains(err.Error(), raw) {
				t.Fatalf("error echoes the reference: %v", err)
			}
			return
		}
		if r.Scheme != "reg" {
			t.Fatalf("%q parsed with scheme %q while local layouts are off", raw, r.Scheme)
		}
		if strings.Contains(raw, "://") {
			t.Fatalf("%q with a scheme was accepted", raw)
		}
		if r.Digest != "" {
			if _, err := checkDigest(r.Digest); err != nil {
				t.Fatalf("%q accepted with a bad digest: %v", raw, err)
			}
		}
	})
}
