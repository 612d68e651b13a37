package tcapp

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

func TestGzipDecoder(t *testing.T) {
	igzip := testenv.Tool(t, "igzip")
	// Run as root, the data plane starts the decoder as nobody.
	dir := testenv.SharedTempDir(t)
	script := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	wrapper := script("igzip", "exec "+igzip+` "$@"`, 0o755)
	for _, c := range []struct {
		setting, want, err string
	}{
		{setting: "builtin", want: "built-in"},
		{setting: "auto", want: igzip},
		{setting: wrapper, want: wrapper},
		{setting: filepath.Join(dir, "absent"), err: "install igzip"},
		// Run as root, the data plane starts the decoder as nobody.
		{setting: script("private", "exec "+igzip+` "$@"`, 0o700), err: "not a program anyone may run"},
		// Found before the first build, not by every layer falling back.
		{setting: script("broken", "cat >/dev/null", 0o755), err: "decoded 0 bytes"},
	} {
		g, err := GzipDecoder(c.setting)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "CUBE_TEMPLATE_CENTER_GZIP_DECODER") {
				t.Errorf("%s: err = %v, want one naming the setting and %q", c.setting, err, c.err)
			}
		case err != nil:
			t.Errorf("%s: %v", c.setting, err)
		case !strings.Contains(g.String(), c.want):
			t.Errorf("%s: decoder %s, want %s", c.setting, g, c.want)
		}
	}
}
