package buildertest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// The readers below drive e2fsprogs in batches: one debugfs process runs a
// command file and echoes every command as "debugfs: <cmd>" on stdout, which
// splits the output into one section per command. Inodes are always named
// as "<N>", so no path needs quoting.

// ReadImage reads every entry of the ext4 image at img with debugfs: the
// directory tree with `ls -l -p`, each inode with `stat`, xattr values with
// `ea_get -f` and file contents and slow symlink targets with `dump`.
func ReadImage(ctx context.Context, img string) (Tree, error) {
	scratch, err := os.MkdirTemp(fastScratch(), "buildertest-read-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)

	type dirRef struct {
		path string
		ino  uint64
	}
	tree := Tree{".": {Path: ".", Type: TypeDir, Inode: 2}}
	queue := []dirRef{{".", 2}}
	for len(queue) > 0 {
		var cmds []string
		for _, d := range queue {
			cmds = append(cmds, fmt.Sprintf("ls -l -p <%d>", d.ino))
		}
		sections, err := debugfsBatch(ctx, img, cmds, scratch)
		if err != nil {
			return nil, err
		}
		var next []dirRef
		for i, d := range queue {
			for _, line := range lsRecords(sections[i]) {
				e, err := parseLsLine(line)
				if err != nil {
					return nil, fmt.Errorf("ls of %s: %w", d.path, err)
				}
				if e == nil {
					continue
				}
				e.Path = path.Join(d.path, e.Path)
				if _, dup := tree[e.Path]; dup {
					return nil, fmt.Errorf("%s listed twice", e.Path)
				}
				tree[e.Path] = e
				if e.Type == TypeDir {
					next = append(next, dirRef{e.Path, e.Inode})
				}
			}
		}
		queue = next
	}

	// One stat per inode; hard links share it.
	byIno := map[uint64][]*Entry{}
	for _, e := range tree {
		byIno[e.Inode] = append(byIno[e.Inode], e)
	}
	inos := make([]uint64, 0, len(byIno))
	for ino := range byIno {
		inos = append(inos, ino)
	}
	sort.Slice(inos, func(i, j int) bool { return inos[i] < inos[j] })
	var cmds []string
	for _, ino := range inos {
		cmds = append(cmds, fmt.Sprintf("stat <%d>", ino))
	}
	sections, err := debugfsBatch(ctx, img, cmds, scratch)
	if err != nil {
		return nil, err
	}
	stats := map[uint64]*inodeStat{}
	for i, ino := range inos {
		st, err := parseStat(sections[i])
		if err != nil {
			return nil, fmt.Errorf("stat <%d> (%s): %w", ino, byIno[ino][0].Path, err)
		}
		stats[ino] = st
	}

	// xattr values and contents, fetched into scratch files.
	cmds = cmds[:0]
	type fetch struct {
		ino   uint64
		xattr string // "" for content
		file  string
	}
	var fetches []fetch
	for _, ino := range inos {
		st, e := stats[ino], byIno[ino][0]
		for k, name := range st.xattrNames {
			f := filepath.Join(scratch, fmt.Sprintf("x-%d-%d", ino, k))
			cmds = append(cmds, fmt.Sprintf("ea_get -f %s <%d> %s", quote(f), ino, quote(name)))
			fetches = append(fetches, fetch{ino, name, f})
		}
		if (e.Type == TypeReg && st.size > 0) || (e.Type == TypeSymlink && !st.fastLink) {
			f := filepath.Join(scratch, fmt.Sprintf("d-%d", ino))
			cmds = append(cmds, fmt.Sprintf("dump <%d> %s", ino, quote(f)))
			fetches = append(fetches, fetch{ino, "", f})
		}
	}
	if _, err := debugfsBatch(ctx, img, cmds, scratch); err != nil {
		return nil, err
	}
	values := map[uint64]map[string]string{}
	content := map[uint64]string{} // sha256 or symlink target
	for _, f := range fetches {
		b, err := os.ReadFile(f.file)
		if err != nil {
			return nil, fmt.Errorf("inode %d: %w", f.ino, err)
		}
		switch {
		case f.xattr != "":
			if values[f.ino] == nil {
				values[f.ino] = map[string]string{}
			}
			values[f.ino][f.xattr] = string(b)
		case byIno[f.ino][0].Type == TypeSymlink:
			content[f.ino] = string(b)
		default:
			sum := sha256.Sum256(b)
			content[f.ino] = hex.EncodeToString(sum[:])
		}
		os.Remove(f.file)
	}

	emptySHA := sha256.Sum256(nil)
	for ino, es := range byIno {
		st := stats[ino]
		if _, ok := content[ino]; !ok && es[0].Type == TypeReg && st.size == 0 {
			content[ino] = hex.EncodeToString(emptySHA[:])
		}
		for _, e := range es {
			e.MTime = st.mtime
			e.Blocks = st.blocks
			e.Xattrs = values[ino]
			switch e.Type {
			case TypeReg:
				e.Size = st.size
				e.SHA256 = content[ino]
			case TypeSymlink:
				e.Target = st.fastTarget
				if !st.fastLink {
					e.Target = content[ino]
				}
			case TypeChar, TypeBlock:
				e.Major, e.Minor = st.major, st.minor
			}
			if ino == 2 {
				e.Mode, e.UID, e.GID = st.mode, st.uid, st.gid
			}
		}
	}
	return tree, nil
}

// debugfsBatch runs cmds in one read-only debugfs and returns each
// command's output lines. Anything on stderr beyond the version banner is
// an error.
func debugfsBatch(ctx context.Context, img string, cmds []string, scratch string) ([][]string, error) {
	out := make([][]string, len(cmds))
	if len(cmds) == 0 {
		return out, nil
	}
	script, err := os.CreateTemp(scratch, "cmds-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(script.Name())
	for _, c := range cmds {
		if strings.ContainsAny(c, "\n") {
			return nil, fmt.Errorf("command with newline: %q", c)
		}
		fmt.Fprintln(script, c)
	}
	if err := script.Close(); err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "debugfs", "-f", script.Name(), img)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("debugfs: %w: %s", err, clip(stderr.String()))
	}
	if bad := nonBanner(stderr.String()); bad != "" {
		return nil, fmt.Errorf("debugfs reported: %s", clip(bad))
	}
	i := -1
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Text()
		if i+1 < len(cmds) && line == "debugfs: "+cmds[i+1] {
			i++
			continue
		}
		if i < 0 {
			return nil, fmt.Errorf("debugfs output before the first command: %q", line)
		}
		out[i] = append(out[i], line)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if i != len(cmds)-1 {
		return nil, fmt.Errorf("debugfs echoed %d of %d commands", i+1, len(cmds))
	}
	return out, nil
}

var banner = regexp.MustCompile(`^debugfs [0-9]+\.[0-9]+`)

func nonBanner(stderr string) string {
	var bad []string
	for _, l := range strings.Split(stderr, "\n") {
		if l != "" && !banner.MatchString(l) {
			bad = append(bad, l)
		}
	}
	return strings.Join(bad, "\n")
}

// quote quotes a debugfs argument.
func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// lsRecords joins the lines of `ls -l -p` output into records: debugfs
// prints names raw, so a name holding a newline spans lines. A record is
// complete at its eighth "/"-separated field, since names hold no "/".
func lsRecords(lines []string) []string {
	var out []string
	pending := ""
	for _, l := range lines {
		if pending != "" {
			l = pending + "\n" + l
		}
		if l != "" && strings.Count(l, "/") < 7 {
			pending = l
			continue
		}
		pending = ""
		out = append(out, l)
	}
	if pending != "" {
		out = append(out, pending) // parseLsLine reports it
	}
	return out
}

// parseLsLine parses one line of `ls -l -p`: /ino/mode/uid/gid/name/size/.
// It returns nil for "." and "..", and for blank lines.
func parseLsLine(line string) (*Entry, error) {
	if line == "" {
		return nil, nil
	}
	f := strings.Split(line, "/")
	if len(f) != 8 || f[0] != "" || f[7] != "" {
		return nil, fmt.Errorf("unexpected ls line %q", line)
	}
	if f[5] == "." || f[5] == ".." || f[1] == "0" {
		return nil, nil // "0" is an unused slot (lost+found is made of them)
	}
	ino, err1 := strconv.ParseUint(f[1], 10, 64)
	mode, err2 := strconv.ParseUint(f[2], 8, 32)
	uid, err3 := strconv.ParseUint(f[3], 10, 32)
	gid, err4 := strconv.ParseUint(f[4], 10, 32)
	for _, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			return nil, fmt.Errorf("ls line %q: %w", line, err)
		}
	}
	e := &Entry{Path: f[5], Inode: ino, Mode: uint32(mode) & 0o7777, UID: uint32(uid), GID: uint32(gid)}
	switch mode & 0o170000 {
	case 0o100000:
		e.Type = TypeReg
	case 0o040000:
		e.Type = TypeDir
	case 0o120000:
		e.Type = TypeSymlink
	case 0o020000:
		e.Type = TypeChar
	case 0o060000:
		e.Type = TypeBlock
	case 0o010000:
		e.Type = TypeFIFO
	default:
		return nil, fmt.Errorf("ls line %q: unsupported file type %06o", line, mode)
	}
	return e, nil
}

// inodeStat is what the suite takes from `stat <ino>`.
type inodeStat struct {
	mode, uid, gid uint32
	size, blocks   int64
	mtime          int64
	fastLink       bool
	fastTarget     string
	major, minor   uint32
	xattrNames     []string
}

var (
	statMode   = regexp.MustCompile(`Mode:\s+([0-7]+)`)
	statOwner  = regexp.MustCompile(`^User:\s+([0-9]+)\s+Group:\s+([0-9]+).*Size:\s+([0-9]+)`)
	statBlocks = regexp.MustCompile(`Blockcount:\s+([0-9]+)`)
	statMtime  = regexp.MustCompile(`^\s*mtime: 0x([0-9a-f]+)(?::([0-9a-f]+))?`)
	statDev    = regexp.MustCompile(`Device major/minor number: ([0-9]+):([0-9]+)`)
	statXattr  = regexp.MustCompile(`^  (.+) \(([0-9]+)\)( = .*)?$`)
)

func parseStat(lines []string) (*inodeStat, error) {
	st := &inodeStat{}
	seen := map[string]bool{}
	inXattrs := false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if inXattrs {
			if m := statXattr.FindStringSubmatch(l); m != nil {
				st.xattrNames = append(st.xattrNames, m[1])
				continue
			}
			inXattrs = false
		}
		switch {
		case strings.HasPrefix(l, "Inode:"):
			m := statMode.FindStringSubmatch(l)
			if m == nil {
				return nil, fmt.Errorf("no mode in %q", l)
			}
			v, _ := strconv.ParseUint(m[1], 8, 32)
			st.mode = uint32(v)
			seen["mode"] = true
		case statOwner.MatchString(l):
			m := statOwner.FindStringSubmatch(l)
			u, _ := strconv.ParseUint(m[1], 10, 32)
			g, _ := strconv.ParseUint(m[2], 10, 32)
			st.uid, st.gid = uint32(u), uint32(g)
			st.size, _ = strconv.ParseInt(m[3], 10, 64)
			seen["owner"] = true
		case statBlocks.MatchString(l):
			st.blocks, _ = strconv.ParseInt(statBlocks.FindStringSubmatch(l)[1], 10, 64)
		case statMtime.MatchString(l):
			m := statMtime.FindStringSubmatch(l)
			lo, _ := strconv.ParseUint(m[1], 16, 32)
			sec := int64(int32(uint32(lo)))
			if m[2] != "" {
				extra, _ := strconv.ParseUint(m[2], 16, 32)
				sec += int64(extra&3) << 32
			}
			st.mtime = sec
			seen["mtime"] = true
		case strings.HasPrefix(l, "Fast link dest: "):
			// The target is printed raw and quoted; a newline in it
			// continues on the next lines, up to the size stat printed.
			v := strings.TrimPrefix(l, "Fast link dest: ")
			for int64(len(v)) < st.size+2 && i+1 < len(lines) {
				i++
				v += "\n" + lines[i]
			}
			if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
				return nil, fmt.Errorf("odd fast link line %q", l)
			}
			st.fastLink, st.fastTarget = true, v[1:len(v)-1]
		case statDev.MatchString(l):
			m := statDev.FindStringSubmatch(l)
			a, _ := strconv.ParseUint(m[1], 10, 32)
			b, _ := strconv.ParseUint(m[2], 10, 32)
			st.major, st.minor = uint32(a), uint32(b)
		case l == "Extended attributes:":
			inXattrs = true
		}
	}
	for _, k := range []string{"mode", "owner", "mtime"} {
		if !seen[k] {
			return nil, fmt.Errorf("no %s in stat output %q", k, strings.Join(lines, "\n"))
		}
	}
	return st, nil
}

// ImageInfo is the superblock summary dumpe2fs -h prints.
type ImageInfo struct {
	BlockSize, BlockCount, FreeBlocks int64
	InodeCount, FreeInodes            int64
	Features                          []string
}

// ReadImageInfo runs dumpe2fs -h on img.
func ReadImageInfo(ctx context.Context, img string) (ImageInfo, error) {
	var info ImageInfo
	out, err := exec.CommandContext(ctx, "dumpe2fs", "-h", img).Output()
	if err != nil {
		return info, fmt.Errorf("dumpe2fs -h %s: %w", img, err)
	}
	fields := map[string]*int64{
		"Block size": &info.BlockSize, "Block count": &info.BlockCount, "Free blocks": &info.FreeBlocks,
		"Inode count": &info.InodeCount, "Free inodes": &info.FreeInodes,
	}
	found := 0
	for _, l := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		if k == "Filesystem features" {
			info.Features = strings.Fields(v)
		}
		if p := fields[k]; p != nil {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return info, fmt.Errorf("dumpe2fs %s: %q", k, v)
			}
			*p = n
			found++
		}
	}
	if found != len(fields) {
		return info, fmt.Errorf("dumpe2fs -h %s: missing fields in %q", img, clip(string(out)))
	}
	return info, nil
}

// Fsck runs e2fsck -fn on img and fails unless it exits 0 (nothing to fix).
func Fsck(ctx context.Context, img string) error {
	out, err := exec.CommandContext(ctx, "e2fsck", "-fn", img).CombinedOutput()
	if err != nil {
		return fmt.Errorf("e2fsck -fn %s: %w:\n%s", img, err, clip(string(out)))
	}
	return nil
}

// FileSHA256 hashes a file.
func FileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func clip(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 4000 {
		return s[:2000] + "\n...\n" + s[len(s)-2000:]
	}
	return s
}
