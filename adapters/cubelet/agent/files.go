package agent

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// DefaultFileMode is the mode of the agent's files unless Config.FileMode
// says otherwise: owner read-write, group read, nothing for others.
const DefaultFileMode os.FileMode = 0o640

// dirModeOf is the directory mode for file mode m: a search bit wherever m
// has a read bit (0640 gives 0750, 0644 gives 0755).
func dirModeOf(m os.FileMode) os.FileMode {
	return m | (m&0o444)>>2
}

// mkdirs creates each directory (and its parents) that is missing, with the
// agent's directory mode whatever the umask. Directories that exist keep
// their mode: the data dir may be the operator's.
func (a *Agent) mkdirs(dirs ...string) error {
	for _, d := range dirs {
		if err := a.mkdir(d); err != nil {
			return err
		}
	}
	return nil
}

func (a *Agent) mkdir(dir string) error {
	st, err := os.Stat(dir)
	if err == nil {
		if !st.IsDir() {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: errors.New("not a directory")}
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := a.mkdir(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, a.dirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return os.Chmod(dir, a.dirMode)
}

// createFile opens p for writing, created or truncated, with the agent's
// file mode whatever the umask (and whatever mode an older file had).
func (a *Agent) createFile(p string) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, a.cfg.FileMode)
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(a.cfg.FileMode); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
