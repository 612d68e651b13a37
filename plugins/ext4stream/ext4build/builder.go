package ext4build

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/Microsoft/hcsshim/ext4/tar2ext4"
	"github.com/google/uuid"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Name is the builder's name as reported to the host.
const Name = "ext4stream"

const (
	blockSize = 4096
	// Alignment is the image size granularity (virtio-pmem maps 2 MiB).
	Alignment = 2 << 20
	// DefaultMaxSize caps images when the spec sets no cap. tar2ext4
	// reserves group descriptor blocks for its maximum up front (one block
	// per 16 GiB), so "unlimited" would waste space in every image. Caps
	// up to this size give the same bytes as no cap; larger caps reserve
	// more descriptor blocks.
	DefaultMaxSize = 128 << 30
)

// Builder turns a flattened tree into a compact, read-only ext4 image with
// hcsshim's tar2ext4 and then repairs what tar2ext4 leaves wrong. It is
// stateless and safe for concurrent use.
type Builder struct{}

// New returns a Builder.
func New() *Builder { return &Builder{} }

var _ ports.RootfsBuilder = (*Builder)(nil)

// Name implements ports.RootfsBuilder.
func (*Builder) Name() string { return Name }

// FormatVersion is the version of the bytes this builder writes; bump it
// whenever the output for the same tree changes.
const FormatVersion = "1"

// Format implements ports.RootfsBuilder.
func (*Builder) Format() string { return Name + "/" + FormatVersion }

// Build implements ports.RootfsBuilder. Headroom is not supported: tar2ext4
// writes a file system with exactly the inodes and blocks the tree needs.
// An empty spec.UUID gives the nil UUID; a zero spec.Time leaves invented
// times at 0.
func (*Builder) Build(ctx context.Context, spec ports.BuildSpec) (res ports.BuildResult, err error) {
	id, limit, err := checkSpec(spec)
	if err != nil {
		return res, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(spec.OutPath), "."+filepath.Base(spec.OutPath)+".tmp-*")
	if err != nil {
		return res, fmt.Errorf("ext4stream: create temporary image: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()

	in := newFeed(ctx, spec.Tree, spec.Time)
	out := &cappedFile{f: tmp, limit: limit}
	// tar2ext4 reserves descriptor blocks for its maximum; keeping that
	// maximum fixed makes the bytes independent of MaxSizeBytes, which
	// cappedFile enforces instead.
	libMax := max(limit, DefaultMaxSize)
	if err := tar2ext4.ConvertTarToExt4(in, out, tar2ext4.MaximumDiskSize(libMax)); err != nil {
		if out.exceeded {
			return res, overLimit(spec.MaxSizeBytes, limit)
		}
		return res, classify(err, in, spec.MaxSizeBytes, libMax)
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("ext4stream: %w", err)
	}
	size, err := finish(tmp, id, spec)
	if err != nil {
		return res, fmt.Errorf("ext4stream: post-process image: %w", err)
	}
	if spec.MaxSizeBytes > 0 && size > spec.MaxSizeBytes {
		return res, tooLarge(spec.MaxSizeBytes, fmt.Sprintf("the image needs %d bytes", size))
	}
	if err := tmp.Chmod(0o644); err != nil {
		return res, fmt.Errorf("ext4stream: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return res, fmt.Errorf("ext4stream: sync image: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return res, fmt.Errorf("ext4stream: close image: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("ext4stream: %w", err)
	}
	if err := os.Rename(tmp.Name(), spec.OutPath); err != nil {
		return res, fmt.Errorf("ext4stream: publish image: %w", err)
	}
	return ports.BuildResult{SizeBytes: size}, nil
}

// checkSpec validates spec and returns the parsed UUID and the size limit
// handed to tar2ext4 (rounded down to the alignment so that rounding the
// final image up cannot cross the cap).
func checkSpec(spec ports.BuildSpec) (id [16]byte, limit int64, err error) {
	switch {
	case spec.Tree == nil:
		return id, 0, &core.FieldError{Field: "Tree", Reason: "is nil"}
	case spec.OutPath == "":
		return id, 0, &core.FieldError{Field: "OutPath", Reason: "is empty"}
	case spec.HeadroomBytes < 0 || spec.HeadroomInodes < 0:
		return id, 0, &core.FieldError{Field: "Headroom", Reason: "must not be negative"}
	case spec.HeadroomBytes > 0 || spec.HeadroomInodes > 0:
		return id, 0, fmt.Errorf("ext4stream: headroom (%d bytes, %d inodes) requested, but this builder "+
			"writes a compact read-only file system with no free blocks or inodes: %w",
			spec.HeadroomBytes, spec.HeadroomInodes, core.ErrUnsupported)
	case spec.MaxSizeBytes < 0:
		return id, 0, &core.FieldError{Field: "MaxSizeBytes", Reason: "must not be negative"}
	}
	if spec.UUID != "" {
		u, err := uuid.Parse(spec.UUID)
		if err != nil {
			return id, 0, &core.FieldError{Field: "UUID", Reason: err.Error()}
		}
		id = u
	}
	limit = DefaultMaxSize
	if spec.MaxSizeBytes > 0 {
		limit = spec.MaxSizeBytes / Alignment * Alignment
		if limit == 0 {
			return id, 0, tooLarge(spec.MaxSizeBytes, "the smallest image is 2 MiB")
		}
	}
	return id, limit, nil
}

// tooLarge reports an image that does not fit spec.MaxSizeBytes. It is the
// caller's limit that is at fault, so the class is invalid argument.
func tooLarge(capBytes int64, detail string) error {
	return fmt.Errorf("ext4stream: image exceeds MaxSizeBytes %d: %s: %w", capBytes, detail, core.ErrInvalidArgument)
}

// overLimit reports an image that outgrew limit: the caller's cap when
// there is one, else this builder's own maximum.
func overLimit(capBytes, limit int64) error {
	if capBytes <= 0 {
		return fmt.Errorf("ext4stream: the image needs more than this builder's maximum of %d bytes: %w", limit, core.ErrUnsupported)
	}
	return tooLarge(capBytes, fmt.Sprintf("the image needs more than %d bytes", limit))
}

// classify turns a tar2ext4 failure into an error with a class. The feed's
// own error wins: tar2ext4 rewraps reader errors, and the feed knows the
// real cause (bad entry, cancellation, broken stream). tar2ext4's own
// errors are plain strings, so they are matched by text; TestBuildErrors
// pins the texts this relies on.
func classify(err error, in *feed, capBytes, libMax int64) error {
	if in.err != nil {
		return fmt.Errorf("ext4stream: %w", in.err)
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "disk exceeded maximum size"):
		return overLimit(capBytes, libMax)
	case strings.Contains(msg, "could not fit xattr"):
		// tar2ext4 has one inode's spare space plus one 4 KiB block for
		// xattrs and no ea_inode support.
		return fmt.Errorf("ext4stream: %s (xattrs larger than one block): %w", msg, core.ErrUnsupported)
	case strings.Contains(msg, "maximum link count"):
		return fmt.Errorf("ext4stream: %s: %w", msg, core.ErrUnsupported)
	}
	return fmt.Errorf("ext4stream: tar2ext4 after %d entries: %w", in.entries, err)
}

// cappedFile is the image file as tar2ext4 sees it: writes that would
// extend it past limit fail.
type cappedFile struct {
	f        *os.File
	pos      int64
	limit    int64
	exceeded bool
}

var errCapped = errors.New("image size limit reached")

func (c *cappedFile) Write(p []byte) (int, error) {
	if c.pos+int64(len(p)) > c.limit {
		c.exceeded = true
		return 0, errCapped
	}
	n, err := c.f.Write(p)
	c.pos += int64(n)
	return n, err
}

func (c *cappedFile) Read(p []byte) (int, error) {
	n, err := c.f.Read(p)
	c.pos += int64(n)
	return n, err
}

func (c *cappedFile) Seek(off int64, whence int) (int64, error) {
	pos, err := c.f.Seek(off, whence)
	if err == nil {
		c.pos = pos
	}
	return pos, err
}

// finish repairs and completes tar2ext4's output in place and returns the
// final size.
func finish(f *os.File, id [16]byte, spec ports.BuildSpec) (int64, error) {
	im, err := readImage(f)
	if err != nil {
		return 0, err
	}
	if err := im.checkTar2ext4Shape(); err != nil {
		return 0, fmt.Errorf("unexpected tar2ext4 output: %w", err)
	}
	if _, _, err := fixInodes(im, spec.Time); err != nil {
		return 0, err
	}
	if _, err := fixInodeBitmapPadding(im); err != nil {
		return 0, err
	}
	if _, err := growTo(im, Alignment/blockSize, f.Truncate); err != nil {
		return 0, err
	}
	setIdentity(im, id, spec.Time)
	if err := im.flush(); err != nil {
		return 0, err
	}
	return im.blocksCount() * im.blockSize, nil
}
