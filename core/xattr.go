package core

import (
	"archive/tar"
	"strings"
)

// XattrAllowed is the extended-attribute namespace allow-list of a root
// filesystem, for an entry of tar type typ: the flattener refuses a layer
// that breaks it and every builder holds its tree to it. Overlay control
// attributes are refused (overlayfs would act on them if the image became
// a lower layer), the kernel allows user.* only on files and
// directories, and a name with a control character is refused in every
// namespace (see XattrNameClean).
func XattrAllowed(name string, typ byte) bool {
	if !XattrNameClean(name) {
		return false
	}
	ns, rest, ok := strings.Cut(name, ".")
	if !ok || rest == "" {
		return false
	}
	switch ns {
	case "user":
		return !strings.HasPrefix(rest, "overlay.") && (typ == tar.TypeReg || typ == tar.TypeDir)
	case "trusted":
		return !strings.HasPrefix(rest, "overlay.")
	case "security":
		return true
	case "system":
		return rest == "posix_acl_access" || (rest == "posix_acl_default" && typ == tar.TypeDir)
	}
	return false
}

// XattrNameClean reports whether name is free of control characters
// (bytes below 0x20, and DEL). No real image needs one, and a builder that
// hands names to a line-oriented tool (debugfs runs one command per line,
// as root) would let a newline end the name and start a command.
func XattrNameClean(name string) bool {
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] == 0x7f {
			return false
		}
	}
	return true
}
