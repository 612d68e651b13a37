//go:build !linux

package plugin

import "os/exec"

// diesWithHost does nothing where the kernel offers no parent-death
// signal; go-plugin still kills its plugins when the host exits cleanly.
func diesWithHost(*exec.Cmd) {}
