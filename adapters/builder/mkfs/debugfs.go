package mkfs

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/cubesandbox/templatecenter/core"
)

// debugfsQuote quotes one argument for debugfs's command parser: inside
// double quotes a doubled quote stands for one. It cannot quote a line
// end; script.quote refuses those.
func debugfsQuote(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// maxScriptLine bounds a debugfs command line. debugfs reads its command
// file with fgets into a BUFSIZ buffer (8192 bytes with glibc, 1024 with
// musl) and runs what does not fit as the next command, so a line must
// fit the smaller: 1022 bytes and the newline.
const maxScriptLine = 1022

// unscriptable says why s cannot be one debugfs argument, or "". debugfs
// ends a command line at its first '\n' or '\r' (and a NUL ends the
// string), so the rest of s would run as a command of its own, on the
// host, as root ("dump" writes a host file, "!" runs a shell). No quoting
// spells them.
func unscriptable(s string) string {
	switch i := strings.IndexAny(s, "\n\r\x00"); {
	case i < 0:
		return ""
	case s[i] == '\n':
		return "holds a newline"
	case s[i] == '\r':
		return "holds a carriage return"
	default:
		return "holds a NUL byte"
	}
}

// script is a debugfs command file being written. Each argument and each
// line is checked as it is added; the first that cannot be passed safely
// is kept in err, and a script with an error is never run.
type script struct {
	b     strings.Builder
	entry string // the tree entry the commands are for, named in errors
	err   error
}

func (s *script) fail(detail string) {
	if s.err == nil {
		s.err = fmt.Errorf("mkfs builder: entry %q: %s: %w", s.entry, detail, core.ErrUnsupported)
	}
}

// quote returns v as one quoted argument.
func (s *script) quote(v string) string {
	if why := unscriptable(v); why != "" {
		s.fail(fmt.Sprintf("%q %s, which a debugfs script cannot pass", v, why))
	}
	return debugfsQuote(v)
}

// cmd adds one command line. The whole line is checked again, so an
// unquoted argument cannot break out either.
func (s *script) cmd(args ...string) {
	line := strings.Join(args, " ")
	if why := unscriptable(line); why != "" {
		s.fail(fmt.Sprintf("debugfs command %q %s", clip(line), why))
	} else if len(line) > maxScriptLine {
		s.fail(fmt.Sprintf("a debugfs command of %d bytes, more than the %d debugfs reads as one line", len(line), maxScriptLine))
	}
	s.b.WriteString(line)
	s.b.WriteByte('\n')
}

// encodeDev returns i_block[0] and i_block[1] of a device inode the way
// the kernel writes them: the old 8:8 encoding when both numbers fit a
// byte, otherwise the new 12:20 encoding in the second word.
func encodeDev(major, minor int64) (b0, b1 int64) {
	if major < 256 && minor < 256 {
		return major<<8 | minor, 0
	}
	return 0, minor&0xff | major<<8 | (minor&^0xff)<<12
}

// fixupScript is the debugfs command file run right after mke2fs: it adds
// the deferred device nodes, gives the root directory the tree's root
// attributes and spec.Time, and sets ctime of every inode mke2fs made to
// spec.Time (mke2fs copies the host's ctime, which nobody can choose).
// Paths are always absolute, so debugfs never reads one as "<inode>".
//
// Entries with several xattrs (inos maps their staged path to the image
// inode) get them removed and set again in sorted order, so their layout
// does not depend on the order the staging filesystem listed them in.
// They are named by inode, so their own names never enter the script.
//
// Every string that does enter it (device paths, xattr names, the work
// directory) is checked: one debugfs cannot take as a single argument
// fails the build (core.ErrUnsupported) before debugfs runs.
func fixupScript(t *treeInfo, pre *fsInfo, now int64, work, stage string, inos map[string]uint64) (string, error) {
	s := &script{}
	cmd, quote := s.cmd, s.quote
	at := func(sec int64) string { return "@" + strconv.FormatInt(sec, 10) }

	for _, h := range t.devices {
		s.entry = h.Name
		name := path.Clean(h.Name)
		dir, base := path.Split(name)
		kind := "c"
		if h.Typeflag == tar.TypeBlock {
			kind = "b"
		}
		cmd("cd", quote(path.Clean("/"+dir)))
		cmd("mknod", quote(base), kind, "0", "0")
	}
	s.entry = "."
	cmd("cd", "/")
	for i, h := range t.devices {
		s.entry = h.Name
		abs := quote("/" + path.Clean(h.Name))
		typ := int64(0o020000)
		if h.Typeflag == tar.TypeBlock {
			typ = 0o060000
		}
		b0, b1 := encodeDev(h.Devmajor, h.Devminor)
		mtime := min(h.ModTime.Unix(), now)
		if mtime < 0 {
			mtime = 0
		}
		cmd("sif", abs, "mode", "0"+strconv.FormatInt(typ|h.Mode&0o7777, 8))
		cmd("sif", abs, "uid", strconv.Itoa(h.Uid))
		cmd("sif", abs, "gid", strconv.Itoa(h.Gid))
		cmd("sif", abs, "block[0]", strconv.FormatInt(b0, 10))
		cmd("sif", abs, "block[1]", strconv.FormatInt(b1, 10))
		cmd("sif", abs, "mtime", at(mtime))
		cmd("sif", abs, "atime", at(mtime))
		cmd("sif", abs, "ctime", at(now))
		x := paxXattrs(h)
		names := make([]string, 0, len(x))
		for n := range x {
			names = append(names, n)
		}
		sort.Strings(names)
		for k, n := range names {
			vf := filepath.Join(work, fmt.Sprintf("xattr-%d-%d", i, k))
			if err := os.WriteFile(vf, []byte(x[n]), 0o600); err != nil {
				return "", err
			}
			cmd("ea_set", "-f", quote(vf), abs, quote(n))
		}
	}

	for i, rel := range t.multiXattr {
		s.entry = rel
		p := filepath.Join(stage, filepath.FromSlash(rel))
		names, err := listXattrs(p)
		if err != nil {
			return "", err
		}
		sort.Strings(names)
		ino := "<" + strconv.FormatUint(inos[rel], 10) + ">"
		// One name per ea_rm, so the line stays short however many
		// xattrs the entry has.
		for _, n := range names {
			cmd("ea_rm", ino, quote(n))
		}
		for k, n := range names {
			v, err := getXattr(p, n)
			if err != nil {
				return "", err
			}
			vf := filepath.Join(work, fmt.Sprintf("mxattr-%d-%d", i, k))
			if err := os.WriteFile(vf, v, 0o600); err != nil {
				return "", err
			}
			cmd("ea_set", "-f", quote(vf), ino, quote(n))
		}
	}

	s.entry = "."
	cmd("sif", "<2>", "mode", "0"+strconv.FormatInt(int64(0o040000|t.rootMode), 8))
	cmd("sif", "<2>", "uid", strconv.FormatUint(uint64(t.rootUID), 10))
	cmd("sif", "<2>", "gid", strconv.FormatUint(uint64(t.rootGID), 10))
	for _, f := range []string{"mtime", "atime", "ctime"} {
		cmd("sif", "<2>", f, at(now))
	}
	for _, s := range pre.usedInodes {
		for ino := max(s.lo, firstIno); ino <= s.hi; ino++ {
			cmd("sif", "<"+strconv.FormatInt(ino, 10)+">", "ctime", at(now))
		}
	}
	if s.err != nil {
		return "", s.err
	}
	return s.b.String(), nil
}

// debugfsRead runs cmds in one read-only debugfs and returns the output of
// each. debugfs echoes every command as "debugfs: <cmd>", which delimits
// the sections.
func (r *runner) debugfsRead(ctx context.Context, image, scriptPath string, cmds []string) ([][]byte, error) {
	var script strings.Builder
	for _, c := range cmds {
		script.WriteString(c)
		script.WriteByte('\n')
	}
	if err := os.WriteFile(scriptPath, []byte(script.String()), 0o600); err != nil {
		return nil, fmt.Errorf("mkfs builder: %w", err)
	}
	defer os.Remove(scriptPath)
	out, stderr, err := r.run(ctx, r.tools.debugfs, "-f", scriptPath, image)
	if err != nil {
		return nil, fmt.Errorf("mkfs builder: %w", err)
	}
	if bad := nonBanner(stderr); bad != "" {
		return nil, fmt.Errorf("mkfs builder: debugfs: %s", clip(bad))
	}
	sections := make([][]byte, len(cmds))
	rest := out
	for i := range cmds {
		marker := []byte("debugfs: " + cmds[i] + "\n")
		at := bytes.Index(rest, marker)
		if at < 0 {
			return nil, fmt.Errorf("mkfs builder: debugfs output lacks %q", cmds[i])
		}
		rest = rest[at+len(marker):]
		end := len(rest)
		if i+1 < len(cmds) {
			if n := bytes.Index(rest, []byte("debugfs: "+cmds[i+1]+"\n")); n >= 0 {
				end = n
			}
		}
		sections[i] = rest[:end]
	}
	return sections, nil
}

// lsRecord is one "ls -p" line: /ino/mode/uid/gid/name/size/. Names
// cannot hold a slash but may hold a newline, hence the byte-level parse.
var lsRecord = regexp.MustCompile(`^/([0-9]+)/[0-7]+/[0-9]+/[0-9]+/([^/]*)/[0-9]*/\n`)

// parseLs returns name -> inode for the entries of one "ls -p" section,
// without ".", ".." and unused slots.
func parseLs(b []byte) (map[string]uint64, error) {
	out := map[string]uint64{}
	for {
		b = bytes.TrimLeft(b, "\n")
		if len(b) == 0 {
			return out, nil
		}
		m := lsRecord.FindSubmatch(b)
		if m == nil {
			return nil, fmt.Errorf("unexpected ls output %q", clip(string(b)))
		}
		b = b[len(m[0]):]
		name := string(m[2])
		ino, err := strconv.ParseUint(string(m[1]), 10, 64)
		if err != nil {
			return nil, err
		}
		if ino == 0 || name == "." || name == ".." {
			continue
		}
		out[name] = ino
	}
}

// lookupInodes finds the image inode of each staged path (slash-separated,
// relative) by listing the directories on the way with debugfs. Every
// listing is checked against the staged directory, so a name that could
// confuse the parse (one holding a newline and a fake echo line) fails the
// build instead of pointing at the wrong inode.
func (r *runner) lookupInodes(ctx context.Context, image, stage, work string, paths []string) (map[string]uint64, error) {
	inos := map[string]uint64{".": 2}
	need := map[string]bool{}
	for _, p := range paths {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			need[d] = true
		}
		need["."] = true
	}
	byDepth := map[int][]string{}
	maxDepth := 0
	for d := range need {
		n := 0
		if d != "." {
			n = strings.Count(d, "/") + 1
		}
		byDepth[n] = append(byDepth[n], d)
		maxDepth = max(maxDepth, n)
	}
	for depth := 0; depth <= maxDepth; depth++ {
		dirs := byDepth[depth]
		sort.Strings(dirs)
		cmds := make([]string, len(dirs))
		for i, d := range dirs {
			ino, ok := inos[d]
			if !ok {
				return nil, fmt.Errorf("mkfs builder: directory %q not found in the image", d)
			}
			cmds[i] = fmt.Sprintf("ls -p <%d>", ino)
		}
		if len(cmds) == 0 {
			continue
		}
		sections, err := r.debugfsRead(ctx, image, filepath.Join(work, "lookup.debugfs"), cmds)
		if err != nil {
			return nil, err
		}
		for i, d := range dirs {
			listed, err := parseLs(sections[i])
			if err != nil {
				return nil, fmt.Errorf("mkfs builder: listing %q: %w", d, err)
			}
			ents, err := os.ReadDir(filepath.Join(stage, filepath.FromSlash(d)))
			if err != nil {
				return nil, fmt.Errorf("mkfs builder: %w", err)
			}
			want := len(ents)
			if _, ok := listed["lost+found"]; ok && d == "." && !slices.ContainsFunc(ents, func(e os.DirEntry) bool { return e.Name() == "lost+found" }) {
				want++
			}
			if len(listed) != want {
				return nil, fmt.Errorf("mkfs builder: image directory %q has %d entries, staging %d", d, len(listed), want)
			}
			for _, e := range ents {
				ino, ok := listed[e.Name()]
				if !ok {
					return nil, fmt.Errorf("mkfs builder: %q missing from image directory %q", e.Name(), d)
				}
				inos[path.Join(d, e.Name())] = ino
			}
		}
	}
	out := make(map[string]uint64, len(paths))
	for _, p := range paths {
		ino, ok := inos[p]
		if !ok {
			return nil, fmt.Errorf("mkfs builder: %q not found in the image", p)
		}
		out[p] = ino
	}
	return out, nil
}

// nonBanner returns stderr without debugfs's version lines.
func nonBanner(stderr []byte) string {
	var bad []string
	for _, l := range strings.Split(string(stderr), "\n") {
		if l != "" && !debugfsBanner.MatchString(l) {
			bad = append(bad, l)
		}
	}
	return strings.Join(bad, "\n")
}
