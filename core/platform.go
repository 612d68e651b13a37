package core

import "regexp"

// DefaultPlatform is the platform resolved when a request names none.
const DefaultPlatform = "linux/amd64"

// platformPattern is OS/ARCH[/VARIANT] in the OCI image index's values:
// lowercase letters and digits, as Go's GOOS and GOARCH are (amd64, arm64,
// ppc64le, s390x, riscv64, loong64) and the variants (v7, v8, v3). No OCI
// architecture or variant holds '_': x86_64 and aarch64 are other tools'
// names for amd64 and arm64.
var platformPattern = regexp.MustCompile(`^[a-z0-9]+/[a-z0-9]+(/[a-z0-9]+)?$`)

// ValidatePlatform checks a platform a request names: OS/ARCH[/VARIANT],
// at most MaxNameLen characters. The registry source resolves only
// platforms that pass it.
func ValidatePlatform(p string) error {
	if len(p) > MaxNameLen || !platformPattern.MatchString(p) {
		return fieldErr("platform", "%q is not OS/ARCH[/VARIANT] in lowercase, such as linux/amd64 or linux/arm64/v8", clip(p))
	}
	return nil
}
