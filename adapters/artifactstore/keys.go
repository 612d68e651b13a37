package artifactstore

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/cubesandbox/templatecenter/core"
)

const (
	// maxKeyLen is S3's limit on object key length, applied everywhere so a
	// key valid on one backend is valid on all.
	maxKeyLen = 1024
	// maxComponentLen is the usual file name limit (NAME_MAX).
	maxComponentLen = 255
	// tmpPrefix starts the names of the file backend's in-flight files; keys
	// may not use it, so a temp file can never be mistaken for an object.
	tmpPrefix = ".cube-tmp-"
)

// ValidateKey checks an object key: slash-separated, non-empty components,
// no leading or trailing slash, no "." or ".." components, no backslash or
// control characters, valid UTF-8, at most 1024 bytes. The rules are the same
// for every backend. Errors wrap core.ErrInvalidArgument.
func ValidateKey(key string) error {
	if err := checkKey(key); err != "" {
		return &core.FieldError{Field: "key", Reason: fmt.Sprintf("%q: %s", key, err)}
	}
	return nil
}

func checkKey(key string) string {
	switch {
	case key == "":
		return "must not be empty"
	case len(key) > maxKeyLen:
		return fmt.Sprintf("longer than %d bytes", maxKeyLen)
	case !utf8.ValidString(key):
		return "must be valid UTF-8"
	case strings.HasPrefix(key, "/"):
		return "must not start with /"
	case strings.HasSuffix(key, "/"):
		return "must not end with /"
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f {
			return "must not contain control characters"
		}
		if r == '\\' {
			return "must not contain a backslash"
		}
	}
	for c := range strings.SplitSeq(key, "/") {
		switch {
		case c == "":
			return "must not contain empty path components (//)"
		case c == "." || c == "..":
			return "must not contain . or .. components"
		case len(c) > maxComponentLen:
			return fmt.Sprintf("has a component longer than %d bytes", maxComponentLen)
		case strings.HasPrefix(c, tmpPrefix):
			return "must not use the reserved prefix " + tmpPrefix
		}
	}
	return ""
}

// normalizePrefix turns a configured prefix into "" or "a/b/": it names a
// directory-like area of the bucket, so "cube" and "cube/" mean the same.
func normalizePrefix(p string) (string, error) {
	p = strings.Trim(p, "/")
	if p == "" {
		return "", nil
	}
	if err := checkKey(p); err != "" {
		return "", &core.FieldError{Field: "prefix", Reason: fmt.Sprintf("%q: %s", p, err)}
	}
	return p + "/", nil
}
