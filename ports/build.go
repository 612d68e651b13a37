package ports

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"os"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// ImageRequest names an image to resolve. Credentials are never logged,
// returned in errors, stored or fingerprinted.
type ImageRequest struct {
	Ref      string
	Platform string // OS/ARCH[/VARIANT]; "" means linux/amd64
	Username string
	Password string
}

// ResolvedImage is an image pinned to a manifest digest for one platform.
type ResolvedImage struct {
	// Ref is the canonical reference that was resolved (registry/repo:tag or @digest).
	Ref string
	// Digest is the platform manifest's digest ("sha256:..."); it, not the
	// tag, feeds the fingerprint.
	Digest   string
	Platform string
	Config   ocispec.Image
	// ConfigDescriptor and Layers come from the verified manifest.
	ConfigDescriptor ocispec.Descriptor
	Layers           []ocispec.Descriptor
}

// LocalLayer is a layer blob verified against its descriptor (digest, size)
// and its DiffID, held in the content-addressed layer cache.
type LocalLayer struct {
	Descriptor ocispec.Descriptor
	DiffID     string
	Path       string
}

// PullProgress is reported while layers are fetched.
type PullProgress struct {
	TotalBytes      int64
	DownloadedBytes int64
	TotalLayers     int
	CompletedLayers int
	SpeedBPS        int64
}

// ImageSource resolves and fetches OCI images.
type ImageSource interface {
	// Resolve pins req to a manifest digest for the platform before anything
	// else is fetched. Errors wrap core.ErrInvalidArgument for refused
	// references and core.ErrNotFound for missing images.
	Resolve(ctx context.Context, req ImageRequest) (*ResolvedImage, error)
	// StreamLayers starts fetching every layer of img (concurrently,
	// reusing what the source's cache holds; progress may be nil) and
	// returns at once, in manifest order, so that decoding overlaps the
	// download. Layer DiffIDs are not verified by the source: whoever
	// decodes Blob verifies them. wait blocks until every fetch ended and
	// returns the verified local layers or the first error; it must be
	// called once, after the blobs are consumed or abandoned. The layers
	// stay pinned (not evicted from the source's cache) until ctx ends.
	StreamLayers(ctx context.Context, req ImageRequest, img *ResolvedImage, progress func(PullProgress)) (layers []StreamedLayer, wait func() ([]LocalLayer, error), err error)
}

// BuildSpec is one ext4 build; the tree comes with it as a Tree
// (RootfsBuilder.Build).
type BuildSpec struct {
	// OutPath is where the image is written; the builder writes a temporary
	// file beside it and renames it into place only on success.
	OutPath string
	// UUID is the filesystem UUID and hash seed (derived from the
	// fingerprint so that identical inputs give identical bytes).
	UUID string
	// Time is the fixed timestamp for everything the builder invents.
	Time time.Time
	// HeadroomBytes and HeadroomInodes are extra free space and inodes
	// beyond the content. A builder that cannot honour them returns an error
	// wrapping core.ErrUnsupported.
	HeadroomBytes  int64
	HeadroomInodes int64
	// MaxSizeBytes caps the image; 0 means no cap. An image that would
	// exceed it fails with an error wrapping core.ErrInvalidArgument.
	MaxSizeBytes int64
	// Progress, when set, is called as the image is written with how much
	// of its content is written and how much there is in all (in any unit,
	// done never above total, never going back), from one goroutine at a
	// time and quickly returning. A builder that cannot tell never calls it.
	Progress func(done, total int64)
}

// BuildResult describes the written image.
type BuildResult struct {
	SizeBytes int64
	// SHA256 is the image's sha256 (lowercase hex) when the builder hashed
	// it while writing it; "" means the caller hashes the file.
	SHA256 string
}

// TreeEntry is one entry of a flattened tree (Tree). A tree lists them
// in the order a tar archive of it would: whiteouts already applied,
// every path clean and relative (a directory may carry one trailing "/";
// "." is the root), parents before children, hard links pointing at
// earlier regular files. It is resolved: no entry lies below a symlink
// (the flattener has placed writes through symlinked parents where they
// resolve inside the root), and no name appears twice except a directory
// declared after it was implied by a child.
//
// A builder refuses a tree that breaks the contract with an error
// wrapping core.ErrInvalidArgument whose message holds
// `entry "<name>" rejected: <rule>`, using the rule names of
// ports/flattenertest (path-traversal, absolute-name, unclean-name,
// parent-symlink, parent-not-dir, duplicate-entry, whiteout-in-tree,
// hardlink-target-missing, ...). It never writes outside its scratch and
// output directories and never creates device nodes on the host.
type TreeEntry struct {
	// Header is the entry as a tar archive of the tree carries it (xattrs
	// as SCHILY.xattr.* PAX records).
	Header *tar.Header
	// File and Offset hold the content of a regular file with Size > 0:
	// Header.Size bytes from Offset. Valid until the call that handed the
	// tree over returns.
	File   *os.File
	Offset int64
	// Zero lists the all-zero 4 KiB blocks of the content, counted from
	// its start (the last block zero-padded), as ascending runs [first,
	// count], when ZeroKnown; a builder may leave them out as holes.
	Zero      [][2]uint32
	ZeroKnown bool
	// Layer is the layer the entry (for a regular file: its content) last
	// came from, 0 the lowest, in the order the flattener applied them. A
	// builder may place the content of lower layers first, so that a
	// change in an upper layer leaves the rest of the image where it was
	// (nodes then fetch little of a rebuild: core/chunk). 0 for trees
	// without layers.
	Layer int
}

// Tree is a flattened tree (TreeEntry's contract), read by index, so that
// a large tree need not be held in memory as entries: a flattener may keep
// it on disk and decode one entry at a time.
//
// Entry(i) decodes entry i (0 <= i < Len()) into a TreeEntry the caller
// owns: a fresh Header each call, which the caller may change. Entries may
// be read in any order and more than once, from one goroutine at a time;
// they and their content files are valid until the call that handed the
// tree over (RootfsBuilder.Build, the use of TreeFlattener.Flatten)
// returns. An error from Entry is an I/O error of the tree's storage, not
// a rejection of the entry: the caller fails with it.
type Tree interface {
	Len() int
	Entry(i int) (TreeEntry, error)
}

// TreeLayers is implemented by a Tree that tells an entry's Layer without
// decoding the entry (a builder placing lower layers first asks for every
// entry's layer before it reads the entries).
type TreeLayers interface {
	EntryLayer(i int) int
}

// TreeSlice is a Tree held in memory as entries, for small trees and
// tests. Entry returns a copy of the entry with a copy of its Header.
type TreeSlice []TreeEntry

// Len implements Tree.
func (s TreeSlice) Len() int { return len(s) }

// Entry implements Tree.
func (s TreeSlice) Entry(i int) (TreeEntry, error) {
	e := s[i]
	if e.Header != nil {
		h := *e.Header
		e.Header = &h
	}
	return e, nil
}

// EntryLayer implements TreeLayers.
func (s TreeSlice) EntryLayer(i int) int { return s[i].Layer }

// TreeEntries reads every entry of tree into a slice (whose content files
// stay valid only as long as the tree's).
func TreeEntries(tree Tree) ([]TreeEntry, error) {
	out := make([]TreeEntry, tree.Len())
	for i := range out {
		e, err := tree.Entry(i)
		if err != nil {
			return nil, err
		}
		out[i] = e
	}
	return out, nil
}

// RootfsBuilder turns a flattened tree into an ext4 image.
type RootfsBuilder interface {
	// Name identifies the builder ("mkfs", or a plugin's name).
	Name() string
	// Format identifies the bytes the builder writes for a given input:
	// its name and every version that changes its output (its own format
	// version, the tools it runs). It is part of the artifact id, so two
	// builders, or one builder before and after an upgrade that changes
	// its output, never publish different bytes under one id.
	Format() string
	// Build writes the image of tree at spec.OutPath or fails leaving
	// nothing there. The image uses 4 KiB blocks, is sized to the content
	// plus headroom and is a multiple of 2 MiB. It need not be durable
	// (fsynced): whoever keeps it makes it so (the artifact store syncs the
	// copy it publishes). A build whose ctx ends fails with an error
	// wrapping ctx.Err(); one whose content cannot be read fails too.
	// An error reading the tree (Tree.Entry) fails the build with it.
	Build(ctx context.Context, spec BuildSpec, tree Tree) (BuildResult, error)
}

// ObjectInfo describes a stored artifact object.
type ObjectInfo struct {
	Size    int64
	SHA256  string // lowercase hex
	ModTime time.Time
}

// ArtifactStore holds artifact bytes (local directory, S3, GCS, memory).
type ArtifactStore interface {
	// Put publishes the bytes of r under key. The object becomes visible
	// only complete and only if it has want.Size bytes whose sha256 is
	// want.SHA256; otherwise nothing is published and the error says why
	// (a mismatch wraps core.ErrInvalidArgument). Put reads r at most one
	// byte past want.Size, so a reader longer than declared (even an
	// endless one) fails promptly, and stops reading once ctx ends. A
	// store on a local filesystem may take an *os.File r by linking it
	// rather than copying it (held to the same checks): the caller must
	// not change the file afterwards.
	Put(ctx context.Context, key string, r io.Reader, want ObjectInfo) error
	// Stat returns the object's info or core.ErrNotFound.
	Stat(ctx context.Context, key string) (ObjectInfo, error)
	// Open reads length bytes from offset (length < 0: to the end), or
	// core.ErrNotFound.
	Open(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error)
	// Delete removes the object; a missing object is not an error.
	Delete(ctx context.Context, key string) error
	// List calls fn with the key and info of every object whose key starts
	// with prefix, each once, in no particular order; an object put or
	// deleted while the listing runs may or may not be listed. prefix is ""
	// (every object) or a valid key followed by "/" (otherwise the error
	// wraps core.ErrInvalidArgument); a prefix nothing is under lists
	// nothing. The info has Size and ModTime; SHA256 may be empty (an
	// object listing does not carry it on every store). An error from fn
	// stops the listing and is returned, wrapped.
	List(ctx context.Context, prefix string, fn func(key string, info ObjectInfo) error) error
	// SignedURL mints a time-limited GET URL, or core.ErrUnsupported for
	// stores that cannot (file, memory); URLs are never stored.
	SignedURL(ctx context.Context, key string, ttl time.Duration) (string, error)
	// Backend names the store kind, a URL scheme ("file", "s3", "gs",
	// "mem" in adapters/artifactstore); artifact rows record it.
	Backend() string
}

// FlattenLayer is one layer blob handed to a TreeFlattener.
type FlattenLayer struct {
	// Path is the local file holding the blob; it is read unless Blob is
	// set.
	Path      string
	MediaType string
	Digest    string
	// Size is the blob's size (the descriptor's), when known; flatteners
	// use it to start the largest layers first. 0 means unknown.
	Size int64
	// Blob, when set, yields the blob's bytes from the first one while the
	// blob is still being fetched (StreamedLayer.Blob): the flattener
	// decodes as data arrives. A read error fails the flatten; io.EOF
	// comes only after the whole blob arrived and matched its digest.
	Blob io.Reader
	// DiffID, when set, is the config's digest of the uncompressed layer
	// ("sha256:..." or "sha512:..."); the flattener verifies it with its
	// algorithm while decoding and fails the layer with an error wrapping
	// ErrDiffIDMismatch otherwise (ErrUnsupported for another algorithm).
	DiffID string
	// Derived, when set, is where the flattener may keep what it derives
	// from this blob (its decoded entries and content), so that a later
	// build of the same blob skips decoding it. A flattener commits derived
	// files only after the blob and its DiffID are verified.
	Derived DerivedCache
}

// ErrDiffIDMismatch is wrapped by flatten errors for a layer whose
// uncompressed bytes do not hash to FlattenLayer.DiffID.
var ErrDiffIDMismatch = errors.New("uncompressed layer does not match its diff_id")

// DerivedCache keeps files a consumer derives from one verified blob,
// cached with the blob: evicted with it, counted in the cache's size.
// Names are chosen by the consumer and should carry its format version.
// Implementations are safe for concurrent use.
type DerivedCache interface {
	// Open opens the derived file name for reading, or returns an error
	// wrapping core.ErrNotFound when there is none (or it did not survive,
	// for example, a crash before it reached the disk).
	Open(name string) (*os.File, error)
	// Create returns an empty temporary file for name and commit, which
	// makes it the derived file name atomically (the file must not be
	// written after commit; the caller still closes it). Without commit,
	// or after commit fails, the file is discarded when closed.
	Create(name string) (f *os.File, commit func() error, err error)
}

// StreamedLayer is a layer being fetched (ImageSource.StreamLayers).
type StreamedLayer struct {
	Descriptor ocispec.Descriptor
	// DiffID is the config's rootfs.diff_ids entry for the layer.
	DiffID string
	// Blob reads the blob from its first byte while it is fetched: Read
	// waits for bytes, and io.EOF comes only once the whole blob arrived
	// and matched the descriptor; a failed fetch is the read error. The
	// caller closes it.
	Blob io.ReadCloser
	// Derived keeps files derived from the blob (nil if the source has
	// no cache).
	Derived DerivedCache
}

// TreeStats summarizes a flattened tree.
type TreeStats struct {
	Entries      int
	ContentBytes int64
}

// TreeFlattener applies layers in order and hands the resulting root
// filesystem over as a Tree (TreeEntry's contract), siblings sorted by
// name bytes so that the same layers give the same tree, with references
// to their content in files the flattener holds open while use runs: an
// in-process builder knows the whole tree before it writes.
// Layers apply with OCI semantics: whiteouts and opaque markers hide lower
// layers only, a directory over a directory merges, anything else replaces
// the path and its subtree. Parent components resolve through symlinks as
// if the image were the root (absolute targets restart there, ".." stops
// there, more than 40 symlinks are a loop); the last component is never
// followed. The same rule places whiteouts, opaque markers and hard link
// targets, and the output names the resolved paths.
//
// Hostile input fails with an error wrapping core.ErrInvalidArgument whose
// message names the layer, the entry and the rule (`layer <i> (<digest>):
// entry "<name>" rejected: <rule>`, rule names as in ports/flattenertest);
// nothing outside the flattener's own scratch space is written, and no
// scratch outlives the call. ports/flattenertest is the conformance suite.
type TreeFlattener interface {
	// Flatten calls use once with the resulting tree; it and its content
	// files stay valid until use returns. use's error is returned as is.
	Flatten(ctx context.Context, layers []FlattenLayer, use func(Tree) error) (TreeStats, error)
}
