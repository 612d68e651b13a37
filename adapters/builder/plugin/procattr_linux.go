package plugin

import (
	"os/exec"
	"syscall"
)

// diesWithHost makes the kernel kill the plugin process when the host
// dies, however it dies: go-plugin kills its plugins on a clean exit, but a
// host ended by SIGKILL (a crash, the OOM killer) would otherwise leave
// the plugin running for ever, reparented to init.
func diesWithHost(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
