package tcapp

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGzipDecoder(t *testing.T) {
	dir := t.TempDir()
	private := filepath.Join(dir, "private")
	if err := os.WriteFile(private, []byte("#!/bin/sh\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	public := filepath.Join(dir, "igzip")
	if err := os.WriteFile(public, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		setting, want, err string
	}{
		{setting: "builtin", want: "built-in"},
		{setting: public, want: public},
		{setting: filepath.Join(dir, "absent"), err: "install igzip"},
		// Run as root, the data plane starts the decoder as nobody.
		{setting: private, err: "not a program anyone may run"},
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
