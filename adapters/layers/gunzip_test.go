//go:build linux

package layers

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// script writes an executable shell script standing in for the decoder:
// a wrapper around igzip, or a program that misbehaves as a real one can.
func script(t *testing.T, body string) *GzipProgram {
	t.Helper()
	p := filepath.Join(testenv.SharedTempDir(t), "gunzip")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return &GzipProgram{Path: p}
}

func withGunzip(ls []Layer, p *GzipProgram) []Layer {
	for i := range ls {
		ls[i].Gunzip = p
	}
	return ls
}

func TestGzipProgram(t *testing.T) {
	igzip := testenv.Tool(t, "igzip")
	content := strings.Repeat("0123456789abcdef", 50_000)
	tarB := mkTar(t, dir("d"), reg("d/f", content))
	builtin, _, err := flatten(t, writeLayers(t, blob{Data: gz(t, tarB), MediaType: mtGzip}), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	crc := gz(t, tarB)
	crc[len(crc)-6] ^= 1 // the trailer's CRC-32

	marker := filepath.Join(testenv.SharedTempDir(t), "ran")
	cases := []struct {
		name string
		prog *GzipProgram
		data []byte
		// rule is the rejection wanted; "" with host false means the
		// built-in decoder's tree.
		rule string
		host bool
	}{
		{name: "decodes", prog: script(t, "id -u >"+marker+"; env >>"+marker+"\nexec "+igzip+" \"$@\""), data: gz(t, tarB)},
		{name: "missing program falls back", prog: &GzipProgram{Path: filepath.Join(t.TempDir(), "absent")}, data: gz(t, tarB)},
		{name: "bad crc", prog: &GzipProgram{Path: igzip}, data: crc, rule: RuleCorruptArchive},
		{name: "truncated", prog: &GzipProgram{Path: igzip}, data: gz(t, tarB)[:500], rule: RuleCorruptArchive},
		// Killed (out of memory, an operator): the host failed, not the
		// layer; a rejection would tell the user their image is bad.
		{name: "killed", prog: script(t, "kill -9 $$"), data: gz(t, tarB), host: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, streamed := range []bool{false, true} {
				ls := withGunzip(writeLayers(t, blob{Data: c.data, MediaType: mtGzip}), c.prog)
				if streamed {
					ls[0].Blob = bytes.NewReader(c.data)
				}
				out, _, err := flatten(t, ls, Limits{})
				switch {
				case c.rule != "":
					wantRule(t, err, c.rule)
				case c.host:
					if err == nil || errors.Is(err, ErrRejected) {
						t.Fatalf("streamed %v: %v, want a host error, not a rejection", streamed, err)
					}
				case err != nil:
					t.Fatalf("streamed %v: %v", streamed, err)
				case !bytes.Equal(out, builtin):
					t.Fatalf("streamed %v: the tree differs from the built-in decoder's", streamed)
				}
			}
		})
	}
	ran, err := os.ReadFile(marker)
	if err != nil {
		t.Fatalf("the program never ran: %v", err)
	}
	// Hostile bytes reach it: no root, and nothing of this process's
	// environment (where secrets live).
	lines := strings.Fields(string(ran))
	if testenv.IsRoot() && lines[0] != "65534" {
		t.Errorf("run as root: the decoder ran as uid %s, want nobody", lines[0])
	}
	for _, l := range lines[1:] {
		if !strings.HasPrefix(l, "PWD=") && !strings.HasPrefix(l, "SHLVL=") && l != "_=/usr/bin/env" {
			t.Errorf("the decoder inherited %q", l)
		}
	}
}
