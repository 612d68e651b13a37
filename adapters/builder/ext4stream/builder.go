package ext4stream

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/uuid"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Name is the builder's name as reported to the host.
const Name = "ext4stream"

const (
	// Alignment is the image size granularity (virtio-pmem maps 2 MiB).
	Alignment = 2 << 20
	// DefaultMaxSize is the image size group descriptor blocks are
	// reserved for when the spec sets no larger cap (one 4 KiB block per
	// 16 GiB). Caps up to this size give the same bytes as no cap; larger
	// caps reserve more descriptor blocks.
	DefaultMaxSize = 128 << 30
	// MaxSize is the largest image: block numbers stay 32-bit (no 64bit
	// feature).
	MaxSize = 16<<40 - Alignment
)

// Builder turns a flattened tree into an ext4 image (writer.go lays it
// out, content.go writes it). It is stateless and safe for concurrent use.
type Builder struct{}

// New returns a Builder.
func New() *Builder { return &Builder{} }

var _ ports.RootfsBuilder = (*Builder)(nil)

// Name implements ports.RootfsBuilder.
func (*Builder) Name() string { return Name }

// FormatVersion is the version of the bytes this builder writes; bump it
// whenever the output for the same tree changes. Version 1 was hcsshim's
// tar2ext4 plus repairs; 2 placed entries in tree order; 3 places them
// lower layers first (placeOrder).
const FormatVersion = "3"

// Format implements ports.RootfsBuilder.
func (*Builder) Format() string { return Name + "/" + FormatVersion }

// Build implements ports.RootfsBuilder: it lays the whole tree out first
// (plan), writes the metadata, then copies the content into place in one
// sequential pass while another goroutine hashes the image in order
// (content.go). An empty spec.UUID gives the nil UUID; a zero spec.Time
// leaves invented times at 0.
func (*Builder) Build(ctx context.Context, spec ports.BuildSpec, tree ports.Tree) (ports.BuildResult, error) {
	id, limit, err := checkSpec(spec)
	if err != nil {
		return ports.BuildResult{}, err
	}
	return writeImage(ctx, spec, id, limit,
		func(w *fsWriter) error {
			w.progress = spec.Progress
			return w.plan(ctx, tree)
		},
		func(w *fsWriter, size int64) (string, error) { return w.copyAndHash(ctx, size) })
}

// writeImage writes an image into a temporary file beside spec.OutPath and
// renames it there once whole: fill places the tree, the metadata is
// written, then complete finishes the file (and may return its sha256).
func writeImage(ctx context.Context, spec ports.BuildSpec, id [16]byte, limit int64,
	fill func(*fsWriter) error, complete func(w *fsWriter, size int64) (string, error)) (res ports.BuildResult, err error) {
	tmp, err := os.CreateTemp(filepath.Dir(spec.OutPath), "."+filepath.Base(spec.OutPath)+".tmp-*")
	if err != nil {
		return res, fmt.Errorf("ext4stream: create temporary image: %w", err)
	}
	published := false
	defer func() {
		// Also on a panic, which leaves err nil.
		if !published {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()

	// Descriptor blocks are reserved for the largest image the cap
	// allows, at least DefaultMaxSize's, so that caps up to it give the
	// same bytes as no cap.
	reserve := ceilDiv(ceilDiv(max(limit, DefaultMaxSize), blockSize*blocksPerGroup), descsPerBlock)
	w := newFSWriter(tmp, stampOf(spec.Time), limit/blockSize, uint32(reserve))
	if err := fill(w); err != nil {
		if w.exceeded {
			return res, overLimit(spec.MaxSizeBytes, limit)
		}
		return res, fmt.Errorf("ext4stream: %w", err)
	}
	if planned != nil {
		planned()
	}
	size, err := w.finish(ceilDiv(spec.HeadroomBytes, blockSize), spec.HeadroomInodes, id)
	if err != nil {
		if w.exceeded {
			return res, overLimit(spec.MaxSizeBytes, limit)
		}
		return res, fmt.Errorf("ext4stream: write metadata: %w", err)
	}
	sum, err := complete(w, size)
	if err != nil {
		return res, fmt.Errorf("ext4stream: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return res, fmt.Errorf("ext4stream: %w", err)
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
	published = true
	return ports.BuildResult{SizeBytes: size, SHA256: sum}, nil
}

// planned, when set (by tests), is called once the tree is placed and
// before the metadata is written: where the writer holds the most.
var planned func()

// checkSpec validates spec and returns the parsed UUID and the size limit
// (rounded down to the alignment).
func checkSpec(spec ports.BuildSpec) (id [16]byte, limit int64, err error) {
	switch {
	case spec.OutPath == "":
		return id, 0, &core.FieldError{Field: "OutPath", Reason: "is empty"}
	case spec.HeadroomBytes < 0 || spec.HeadroomInodes < 0:
		return id, 0, &core.FieldError{Field: "Headroom", Reason: "must not be negative"}
	case spec.HeadroomBytes > MaxSize:
		return id, 0, &core.FieldError{Field: "HeadroomBytes", Reason: fmt.Sprintf("more than the largest image, %d bytes", int64(MaxSize))}
	case spec.HeadroomInodes > maxInodes:
		return id, 0, &core.FieldError{Field: "HeadroomInodes", Reason: fmt.Sprintf("more than ext4's %d inodes", int64(maxInodes))}
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
		limit = min(MaxSize, spec.MaxSizeBytes/Alignment*Alignment)
		if limit == 0 {
			return id, 0, tooLarge(spec.MaxSizeBytes, "the smallest image is 2 MiB")
		}
	}
	return id, limit, nil
}

// maxInodes bounds the inode count (a 32-bit field, less the rounding to
// whole groups).
const maxInodes = 1<<32 - 1<<16

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
