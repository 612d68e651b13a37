package core

import (
	"archive/tar"
	"strings"
)

// XattrAllowed is the extended-attribute namespace allow-list of a root
// filesystem, for an entry of tar type typ: the flattener refuses a layer
// that breaks it and every builder holds its tree to it. Overlay control
// attributes are refused (overlayfs would act on them if the image became
// a lower layer), and the kernel allows user.* only on files and
// directories.
func XattrAllowed(name string, typ byte) bool {
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
