package artifactstore

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncFS flushes the whole filesystem f lives on.
func syncFS(f *os.File) error { return unix.Syncfs(int(f.Fd())) }
