package layers

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Layer is one layer blob: a local verified file, or a stream of the blob
// while it is fetched.
type Layer struct {
	Path      string // local file holding the (possibly compressed) blob; unused when Blob is set
	MediaType string // OCI/Docker layer media type: gzip, zstd or uncompressed; "" = sniff magic bytes
	Digest    string // for error messages and the derived cache
	// Size is the blob's size if known (0: the file's), for scheduling the
	// largest layers first.
	Size int64
	// Blob, when set, is read instead of Path: the blob from its first
	// byte, io.EOF only once it arrived whole and verified.
	Blob io.Reader
	// DiffID, when set, must be the digest of the uncompressed layer, in
	// sha256 or sha512 (others are refused with core.ErrUnsupported).
	DiffID string
	// Derived, when set, keeps the decoded layer for later builds.
	Derived ports.DerivedCache
	// Gunzip, when set, decodes gzip in a child process (see GzipProgram);
	// nil is the built-in decoder. The tree is the same either way.
	Gunzip *GzipProgram
}

// Limits bound what a hostile image can make Flatten and Extract do. A zero
// field means "use the DefaultLimits value".
type Limits struct {
	MaxEntries    int    // entries across all layers (implied directories count too)
	MaxTotalBytes int64  // declared sizes of regular files, per layer and in the result
	MaxFileBytes  int64  // declared size of one regular file
	MaxPathDepth  int    // components in one path
	MaxNameLen    int    // bytes in one component
	MaxPathLen    int    // bytes in one path; symlink targets must be shorter
	MaxXattrBytes int    // xattr names plus values, per entry
	MaxZstdWindow uint64 // largest zstd window a layer may ask for
}

// DefaultLimits returns limits generous enough for real images and small
// enough that a hostile one fails fast.
func DefaultLimits() Limits {
	return Limits{
		MaxEntries:    1_000_000,
		MaxTotalBytes: 32 << 30,
		MaxFileBytes:  4 << 30,
		MaxPathDepth:  128,
		MaxNameLen:    255,
		MaxPathLen:    4096,
		MaxXattrBytes: 64 << 10,
		MaxZstdWindow: 128 << 20,
	}
}

// orDefault fills zero fields from DefaultLimits.
func (l Limits) orDefault() Limits {
	d := DefaultLimits()
	if l.MaxEntries <= 0 {
		l.MaxEntries = d.MaxEntries
	}
	if l.MaxTotalBytes <= 0 {
		l.MaxTotalBytes = d.MaxTotalBytes
	}
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = d.MaxFileBytes
	}
	if l.MaxPathDepth <= 0 {
		l.MaxPathDepth = d.MaxPathDepth
	}
	if l.MaxNameLen <= 0 {
		l.MaxNameLen = d.MaxNameLen
	}
	if l.MaxPathLen <= 0 {
		l.MaxPathLen = d.MaxPathLen
	}
	if l.MaxXattrBytes <= 0 {
		l.MaxXattrBytes = d.MaxXattrBytes
	}
	if l.MaxZstdWindow == 0 {
		l.MaxZstdWindow = d.MaxZstdWindow
	}
	return l
}

// Stats counts what a tree holds. Entries counts every emitted entry;
// ContentBytes is the sum of regular file sizes (each inode once).
type Stats struct {
	Entries, Files, Dirs, Symlinks, Hardlinks, Devices, FIFOs int
	ContentBytes                                              int64
}

func (s *Stats) count(typ byte, size int64) {
	s.Entries++
	switch typ {
	case tar.TypeReg:
		s.Files++
		s.ContentBytes += size
	case tar.TypeDir:
		s.Dirs++
	case tar.TypeSymlink:
		s.Symlinks++
	case tar.TypeLink:
		s.Hardlinks++
	case tar.TypeChar, tar.TypeBlock:
		s.Devices++
	case tar.TypeFifo:
		s.FIFOs++
	}
}

// ErrRejected is wrapped by every *RejectError.
var ErrRejected = errors.New("layer content rejected")

// Rules named by RejectError.Rule.
const (
	RuleNulInName          = "nul-in-name"        // NUL byte in a name
	RuleEmptyName          = "empty-name"         // empty entry name
	RulePathTraversal      = "path-traversal"     // a ".." component anywhere in the name
	RuleNameTooLong        = "name-too-long"      // one component longer than MaxNameLen
	RulePathTooLong        = "path-too-long"      // cleaned path longer than MaxPathLen
	RulePathTooDeep        = "path-too-deep"      // more than MaxPathDepth components
	RuleUnsupportedType    = "unsupported-type"   // typeflag outside reg/dir/symlink/link/char/block/fifo
	RuleBadOwner           = "bad-owner"          // uid/gid negative or >= 2^32-1
	RuleBadMode            = "bad-mode"           // negative or oversized mode field
	RuleBadDevice          = "bad-device"         // device numbers outside Linux's 12/20-bit range
	RuleFileTooLarge       = "file-too-large"     // declared size above MaxFileBytes
	RuleLayerTooLarge      = "layer-too-large"    // declared sizes in one layer above MaxTotalBytes
	RuleImageTooLarge      = "image-too-large"    // declared sizes in the result above MaxTotalBytes
	RuleTooManyEntries     = "too-many-entries"   // more than MaxEntries entries
	RuleDecompressionBomb  = "decompression-bomb" // far more decompressed bytes than the entries account for
	RuleXattrTooLarge      = "xattr-too-large"    // xattrs above MaxXattrBytes or kernel limits
	RuleXattrForbidden     = "xattr-forbidden"    // namespace not allowed (trusted.overlay.*, unknown, user.* on special files)
	RuleSymlinkTarget      = "symlink-target"     // empty, NUL or over-long symlink target
	RuleParentSymlink      = "parent-symlink"     // a parent of a tree entry handed to Extract is a symlink
	RuleSymlinkLoop        = "symlink-loop"       // resolving a parent follows more than 40 symlinks
	RuleSymlinkBudget      = "symlink-budget"     // resolving parents costs far more than real images need
	RuleParentNotDir       = "parent-not-dir"     // a parent path component is a file or special file
	RuleRootNotDir         = "root-not-dir"       // an entry would replace the root with a non-directory
	RuleHardlinkEscape     = "hardlink-escape"    // hard link target with ".." components
	RuleHardlinkMissing    = "hardlink-target-missing"
	RuleHardlinkDir        = "hardlink-target-dir"
	RuleHardlinkNotRegular = "hardlink-target-not-regular" // symlink, device, FIFO
	RuleHardlinkSelf       = "hardlink-self"
	RuleWhiteoutInvalid    = "whiteout-invalid"    // ".wh.", ".wh..", ".wh...", ".wh..wh.x"
	RuleWhiteoutInPath     = "whiteout-in-path"    // ".wh." prefix on a parent component
	RuleWhiteoutInTree     = "whiteout-in-tree"    // whiteout handed to Extract
	RuleDuplicateEntry     = "duplicate-entry"     // same name twice in a tree handed to Extract
	RuleAbsoluteName       = "absolute-name"       // absolute name or hard link target in a tree handed to Extract
	RuleUncleanName        = "unclean-name"        // name or hard link target of a tree that is not path.Clean
	RuleCorruptArchive     = "corrupt-archive"     // tar or compression stream broken or truncated
	RuleMediaType          = "media-type"          // unsupported layer media type
	RuleMediaTypeMismatch  = "media-type-mismatch" // bytes do not match the declared media type
	RuleZstdWindow         = "zstd-window"         // zstd frame asks for a window above MaxZstdWindow
)

// RejectError reports hostile or unsupported layer content.
type RejectError struct {
	Layer  int    // index of the layer (0-based); -1 for the tree as a whole or for Extract
	Digest string // layer digest, if known
	Entry  string // entry name as found in the archive ("" when not about one entry)
	Rule   string // one of the Rule* constants
	Detail string // optional extra context
}

func (e *RejectError) Error() string {
	where := "tree"
	if e.Layer >= 0 {
		where = fmt.Sprintf("layer %d", e.Layer)
		if e.Digest != "" {
			where += " (" + e.Digest + ")"
		}
	}
	msg := fmt.Sprintf("%s: entry %q rejected: %s", where, e.Entry, e.Rule)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Is makes errors.Is(err, ErrRejected) and errors.Is(err,
// core.ErrInvalidArgument) true.
func (e *RejectError) Is(target error) bool {
	return target == ErrRejected || target == core.ErrInvalidArgument
}

// ExtractOptions tunes Extract.
type ExtractOptions struct {
	// SkipDevices: char/block devices are not created on the host; they are
	// returned in ExtractResult.Deferred so a builder can add them inside the
	// image (for example with debugfs mknod).
	SkipDevices bool
	// Limits bound the stream; zero fields take DefaultLimits values
	// (MaxZstdWindow is unused).
	Limits Limits
	// HoleMin, when positive, leaves runs of at least this many all-zero
	// bytes (whole 4 KiB blocks) unwritten in regular files of at least
	// SparseMin bytes, as holes, and counts every file's blocks in
	// ExtractResult.Sparse: a builder that skips zero blocks (mke2fs -d)
	// then need not read the files again to size the image.
	HoleMin, SparseMin int64
}

// ExtractResult describes what Extract wrote.
type ExtractResult struct {
	Stats    Stats
	Deferred []*tar.Header // device entries not created (SkipDevices), names cleaned
	// Sparse maps (device, inode) of each regular file Extract scanned
	// (ExtractOptions.HoleMin) to its non-zero 4 KiB blocks and their runs.
	Sparse map[[2]uint64]BlockCount
}

// BlockCount is the non-zero 4 KiB blocks of a file and how many runs of
// consecutive ones they form.
type BlockCount struct{ Data, Runs int64 }
