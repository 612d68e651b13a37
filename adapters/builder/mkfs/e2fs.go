package mkfs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cubesandbox/templatecenter/core"
)

const (
	inodeSize      = 256
	blocksPerGroup = 8 * blockSize
	// firstIno is the first inode mke2fs hands to files; 1..10 are
	// reserved, 2 is the root and 11 lost+found.
	firstIno = 11
)

// mke2fsConf pins every default mke2fs would otherwise take from
// /etc/mke2fs.conf. See doc.go for why these features.
const mke2fsConf = `[defaults]
	base_features = sparse_super,large_file,filetype,dir_index,ext_attr
	default_mntopts = acl,user_xattr
	enable_periodic_fsck = 0
	blocksize = 4096
	inode_size = 256
	inode_ratio = 16384
	reserved_ratio = 0
	hash_alg = half_md4
	flex_bg_size = 16
	errors = remount-ro
	auto_64-bit_support = 0

[fs_types]
	ext4 = {
		features = extent,huge_file,flex_bg,metadata_csum,dir_nlink,extra_isize,^has_journal,^resize_inode,^64bit,^orphan_file,^metadata_csum_seed,^inline_data
	}
	default = {
		inode_ratio = 16384
	}
`

// wantFeatures is what dumpe2fs must report for an image we built; a
// mismatch means the pinned configuration did not take effect.
var wantFeatures = []string{
	"dir_index", "dir_nlink", "ext_attr", "extent", "extra_isize", "filetype",
	"flex_bg", "huge_file", "large_file", "metadata_csum", "sparse_super",
}

// e2fsckConf pins what e2fsck would otherwise take from /etc/e2fsck.conf:
// the slack it leaves in the leaves of the directories it indexes. A
// read-only base image gains nothing from room to grow in place.
const e2fsckConf = `[options]
	indexed_dir_slack_percentage = 0
`

// tools are the resolved paths of the e2fsprogs programs.
type tools struct {
	mkfs, tune2fs, debugfs, e2fsck, dumpe2fs string
}

func (b *Builder) lookTools() (tools, error) {
	var t tools
	for _, x := range []struct {
		dst        *string
		configured string
		name       string
	}{
		{&t.mkfs, b.opts.Mkfs, "mkfs.ext4"},
		{&t.tune2fs, b.opts.Tune2fs, "tune2fs"},
		{&t.debugfs, b.opts.Debugfs, "debugfs"},
		{&t.e2fsck, b.opts.E2fsck, "e2fsck"},
		{&t.dumpe2fs, b.opts.Dumpe2fs, "dumpe2fs"},
	} {
		name := x.configured
		if name == "" {
			name = x.name
		}
		p, err := exec.LookPath(name)
		if err != nil {
			return t, fmt.Errorf("mkfs builder: %s not found (install e2fsprogs or set Options): %v: %w", x.name, err, core.ErrUnsupported)
		}
		*x.dst = p
	}
	return t, nil
}

// runner runs the tools with a fixed environment.
type runner struct {
	tools tools
	env   []string
}

// toolError is a tool that exited non-zero; Output holds the interesting
// part of what it printed.
type toolError struct {
	Tool   string
	Err    error
	Output string
}

func (e *toolError) Error() string {
	if e.Output == "" {
		return fmt.Sprintf("%s: %v", e.Tool, e.Err)
	}
	return fmt.Sprintf("%s: %v: %s", e.Tool, e.Err, e.Output)
}

func (e *toolError) Unwrap() error { return e.Err }

// run executes tool and returns its stdout and stderr. It kills the tool
// when ctx ends and then reports ctx's error.
func (r *runner) run(ctx context.Context, tool string, args ...string) (stdout, stderr []byte, err error) {
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.Env = r.env
	cmd.WaitDelay = 5 * time.Second
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if ctxErr := ctx.Err(); ctxErr != nil {
		return nil, nil, fmt.Errorf("mkfs builder: %s: %w", baseName(tool), ctxErr)
	}
	if err != nil {
		return o.Bytes(), e.Bytes(), &toolError{Tool: baseName(tool), Err: err, Output: clip(e.String() + o.String())}
	}
	return o.Bytes(), e.Bytes(), nil
}

type mkfsArgs struct {
	stage  string // "" formats an empty filesystem (sizing probe)
	image  string
	blocks int64
	inodes int64
	uuid   string
	// noCsum formats without metadata_csum; checksum turns it on after
	// populating (see there why).
	noCsum bool
}

// fullError is mke2fs running out of blocks or inodes while populating.
type fullError struct {
	inodes bool
	err    error
}

func (e *fullError) Error() string { return e.err.Error() }
func (e *fullError) Unwrap() error { return e.err }

func (r *runner) mkfs(ctx context.Context, a mkfsArgs) error {
	args := []string{
		"-q", "-F",
		"-t", "ext4", "-T", "default",
		"-b", strconv.Itoa(blockSize),
		"-I", strconv.Itoa(inodeSize),
		"-m", "0",
		"-N", strconv.FormatInt(a.inodes, 10),
		"-U", a.uuid,
		"-E", "hash_seed=" + a.uuid + ",root_owner=0:0,nodiscard,assume_storage_prezeroed=1",
	}
	if a.noCsum {
		args = append(args, "-O", "^metadata_csum")
	}
	if a.stage != "" {
		args = append(args, "-d", a.stage)
	}
	args = append(args, a.image, strconv.FormatInt(a.blocks, 10))
	_, _, err := r.run(ctx, r.tools.mkfs, args...)
	var te *toolError
	if errors.As(err, &te) {
		return asFull(te.Output, fmt.Errorf("mkfs builder: %w", err)) // mkfs exits 1 when full
	}
	if err != nil {
		return fmt.Errorf("mkfs builder: %w", err)
	}
	return nil
}

// asFull wraps err in a *fullError when output holds libext2fs's message
// for EXT2_ET_INODE_ALLOC_FAIL or EXT2_ET_BLOCK_ALLOC_FAIL.
func asFull(output string, err error) error {
	switch {
	case strings.Contains(output, "Could not allocate inode"):
		return &fullError{inodes: true, err: err}
	case strings.Contains(output, "Could not allocate block"):
		return &fullError{err: err}
	}
	return err
}

// checksum turns metadata_csum on in an image populated without it and
// has e2fsck rebuild the directories to make room for the checksum tail
// of each directory block (indexing every directory of more than one
// block on the way).
//
// mke2fs -d with metadata_csum on verifies the checksum of a file's
// extent tree block again for every data block it appends, and of every
// directory block it scans for each name it adds: on a tree of 30,000
// files that is half of its time. tune2fs and e2fsck -D compute each
// checksum once. e2fsck exits 1 after the rebuild it was asked for; the
// check that follows the fixups (fsck) must then find nothing to fix.
func (r *runner) checksum(ctx context.Context, image string) error {
	if _, _, err := r.run(ctx, r.tools.tune2fs, "-O", "metadata_csum", image); err != nil {
		return fmt.Errorf("mkfs builder: enable metadata_csum: %w", err)
	}
	_, _, err := r.run(ctx, r.tools.e2fsck, "-fyD", image)
	var te *toolError
	var exit *exec.ExitError
	if errors.As(err, &te) && errors.As(err, &exit) && exit.ExitCode() == 1 {
		return nil
	}
	if errors.As(err, &te) {
		return asFull(te.Output, fmt.Errorf("mkfs builder: rebuild directories: %w", err))
	}
	if err != nil {
		return fmt.Errorf("mkfs builder: rebuild directories: %w", err)
	}
	return nil
}

// fsck runs e2fsck -fn, which must find nothing at all to fix.
func (r *runner) fsck(ctx context.Context, image string) error {
	if _, _, err := r.run(ctx, r.tools.e2fsck, "-fn", image); err != nil {
		return fmt.Errorf("mkfs builder: image failed its check: %w", err)
	}
	return nil
}

// debugfsBanner is the version line debugfs prints on stderr every run.
var debugfsBanner = regexp.MustCompile(`^debugfs [0-9]+\.[0-9]+`)

// debugfsScript runs a command file with debugfs -w. debugfs exits 0 even
// when commands fail and reports failures on stderr only, so anything
// there beyond its banner is an error.
func (r *runner) debugfsScript(ctx context.Context, image, script, scriptPath string) error {
	if script == "" {
		return nil
	}
	if err := os.WriteFile(scriptPath, []byte(script), 0o600); err != nil {
		return fmt.Errorf("mkfs builder: %w", err)
	}
	defer os.Remove(scriptPath)
	_, stderr, err := r.run(ctx, r.tools.debugfs, "-w", "-f", scriptPath, image)
	if err != nil {
		return fmt.Errorf("mkfs builder: %w", err)
	}
	if bad := nonBanner(stderr); bad != "" {
		err := fmt.Errorf("mkfs builder: debugfs fixup failed: %s", clip(bad))
		return asFull(bad, err)
	}
	return nil
}

// fsInfo is what dumpe2fs says about an image.
type fsInfo struct {
	blockSize      int64
	blockCount     int64
	freeBlocks     int64
	inodeCount     int64
	freeInodes     int64
	inodesPerGroup int64
	features       []string
	usedInodes     []span // filled only when groups were asked for
}

// span is an inclusive range of inode numbers.
type span struct{ lo, hi int64 }

// dumpe2fs reads the superblock and, with groups, every group's free
// inode list, from which the used inodes are derived.
func (r *runner) dumpe2fs(ctx context.Context, image string, groups bool) (*fsInfo, error) {
	args := []string{image}
	if !groups {
		args = []string{"-h", image}
	}
	out, _, err := r.run(ctx, r.tools.dumpe2fs, args...)
	if err != nil {
		return nil, fmt.Errorf("mkfs builder: %w", err)
	}
	info, err := parseDumpe2fs(out, groups)
	if err != nil {
		return nil, fmt.Errorf("mkfs builder: dumpe2fs %s: %w", image, err)
	}
	return info, nil
}

var groupLine = regexp.MustCompile(`^Group ([0-9]+): `)

func parseDumpe2fs(out []byte, groups bool) (*fsInfo, error) {
	info := &fsInfo{}
	nums := map[string]*int64{
		"Block size":       &info.blockSize,
		"Block count":      &info.blockCount,
		"Free blocks":      &info.freeBlocks,
		"Inode count":      &info.inodeCount,
		"Free inodes":      &info.freeInodes,
		"Inodes per group": &info.inodesPerGroup,
	}
	seen := map[string]bool{}
	group := int64(-1)
	var free []span
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := groupLine.FindStringSubmatch(line); m != nil {
			group, _ = strconv.ParseInt(m[1], 10, 64)
			continue
		}
		if group >= 0 {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "Free inodes:"); ok {
				s, err := parseSpans(rest)
				if err != nil {
					return nil, fmt.Errorf("group %d: %w", group, err)
				}
				free = append(free, s...)
			}
			continue
		}
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		if key == "Filesystem features" {
			info.features = strings.Fields(val)
			seen[key] = true
			continue
		}
		if p, ok := nums[key]; ok && !seen[key] {
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %q", key, val)
			}
			*p = n
			seen[key] = true
		}
	}
	for k := range nums {
		if !seen[k] {
			return nil, fmt.Errorf("no %q in output", k)
		}
	}
	if groups {
		if group < 0 {
			return nil, errors.New("no group descriptors in output")
		}
		info.usedInodes = complement(free, 1, info.inodeCount)
	}
	return info, nil
}

// parseSpans reads "12-2512, 2600, 2700-2800".
func parseSpans(s string) ([]span, error) {
	var out []span
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		a, b, isRange := strings.Cut(f, "-")
		lo, err := strconv.ParseInt(a, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bad inode range %q", f)
		}
		hi := lo
		if isRange {
			if hi, err = strconv.ParseInt(b, 10, 64); err != nil || hi < lo {
				return nil, fmt.Errorf("bad inode range %q", f)
			}
		}
		out = append(out, span{lo, hi})
	}
	return out, nil
}

// complement returns the numbers in [lo, hi] not covered by free.
func complement(free []span, lo, hi int64) []span {
	sort.Slice(free, func(i, j int) bool { return free[i].lo < free[j].lo })
	var used []span
	next := lo
	for _, f := range free {
		if f.lo > next {
			used = append(used, span{next, min(f.lo-1, hi)})
		}
		next = max(next, f.hi+1)
	}
	if next <= hi {
		used = append(used, span{next, hi})
	}
	return used
}

// verify checks what no option of ours may change.
func (i *fsInfo) verify() error {
	if i.blockSize != blockSize {
		return fmt.Errorf("image has %d-byte blocks, want %d", i.blockSize, blockSize)
	}
	got := append([]string(nil), i.features...)
	sort.Strings(got)
	if strings.Join(got, " ") != strings.Join(wantFeatures, " ") {
		return fmt.Errorf("image features %q, want %q (pinned mke2fs.conf not honoured?)", got, wantFeatures)
	}
	return nil
}

// clip keeps tool output readable inside an error message.
func clip(s string) string {
	const max = 2048
	s = strings.TrimSpace(s)
	if len(s) <= max {
		return s
	}
	return s[:max/2] + "\n...[truncated]...\n" + s[len(s)-max/2:]
}

func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}
