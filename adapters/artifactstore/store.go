package artifactstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// The built-in kinds' names (Store.Backend), each declared by its Scheme.
const (
	BackendFile = "file"
	BackendS3   = "s3"
	BackendGCS  = "gs"
	BackendMem  = "mem"
)

// maxSignedURLTTL is the longest lifetime SigV4 allows a presigned URL.
const maxSignedURLTTL = 7 * 24 * time.Hour

// Driver is what each kind of store provides (gocloud's driver.Bucket
// shape): Store adds key validation, the prefix, verification, the
// read-back of remote kinds and error context on top. Keys reaching a
// driver are valid and already carry the prefix. A backend in a package
// of its own implements it and registers its Scheme.
type Driver interface {
	// Put copies src to key and publishes it only if src ends with
	// io.EOF; any other error from src aborts the write, and nothing is
	// published. want is the size and sha256 src is verified against
	// (Stat reports the sha256 back).
	Put(ctx context.Context, key string, src io.Reader, want ports.ObjectInfo) error
	// Stat returns the object's size, sha256 and modification time, or an
	// error wrapping core.ErrNotFound.
	Stat(ctx context.Context, key string) (ports.ObjectInfo, error)
	// Open reads length bytes from offset (length < 0: to the end), as
	// Store.Open describes.
	Open(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error)
	// Remove deletes the object; a missing one is not an error.
	Remove(ctx context.Context, key string) error
	// List calls fn with the full key and info of every object under
	// prefix ("" or ending with "/", already carrying the store's
	// prefix), as Store.List describes.
	List(ctx context.Context, prefix string, fn func(key string, info ports.ObjectInfo) error) error
	// SignedURL mints a presigned GET URL, or fails wrapping
	// core.ErrUnsupported.
	SignedURL(ctx context.Context, key string, ttl time.Duration) (string, error)
	Close() error
}

// Store is a ports.ArtifactStore. Make one with Open or OpenS3; it is safe
// for concurrent use.
type Store struct {
	kind   string
	prefix string // "" or ends with "/"
	be     Driver
}

var _ ports.ArtifactStore = (*Store)(nil)

// Backend names the store kind: the name of the Scheme it was opened by.
func (s *Store) Backend() string { return s.kind }

// Close releases the store's resources.
func (s *Store) Close() error { return s.be.Close() }

func (s *Store) fullKey(key string) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	full := s.prefix + key
	if len(full) > maxKeyLen {
		return "", &core.FieldError{Field: "key", Reason: fmt.Sprintf("%q is longer than %d bytes with the store prefix", key, maxKeyLen)}
	}
	return full, nil
}

// Put publishes r under key once its size and sha256 match want (and, on S3
// and GCS, once the stored object reads back as want). Nothing is
// visible before that, and on a mismatch, a read error or a cancelled context
// nothing is published at all (an existing object under key stays as it
// was). Mismatches wrap ErrContentMismatch. r is read at most one byte past
// want.Size, so a longer (or endless) reader fails at once, and not at all
// once ctx ends. On the file backend an *os.File of want.Size bytes on the
// store's filesystem is linked in instead of copied (see putFile).
func (s *Store) Put(ctx context.Context, key string, r io.Reader, want ports.ObjectInfo) error {
	full, err := s.fullKey(key)
	if err != nil {
		return fmt.Errorf("put artifact: %w", err)
	}
	if err := checkWant(want); err != nil {
		return fmt.Errorf("put artifact %s: %w", key, err)
	}
	if f, ok := r.(*os.File); ok {
		if d, ok := s.be.(*dirBackend); ok {
			switch err := d.putFile(ctx, full, f, want); {
			case err == nil:
				return nil
			case !errors.Is(err, errNoLink):
				return fmt.Errorf("put artifact %s: %w", key, err)
			}
		}
	}
	if err := s.be.Put(ctx, full, newVerifier(r, want), want); err != nil {
		return fmt.Errorf("put artifact %s: %w", key, err)
	}
	if sc, ok := Lookup(s.kind); ok && sc.Remote {
		// A remote store's acknowledgement is no proof that it holds the
		// bytes: read them back before anyone is told they are there.
		if err := s.readBack(ctx, full, want); err != nil {
			return fmt.Errorf("put artifact %s: %w", key, err)
		}
	}
	return nil
}

// ErrStoredMismatch is wrapped by Put errors when a remote store
// acknowledged an upload but reads back other bytes; the object is removed
// unless another upload of the key has replaced it.
var ErrStoredMismatch = errors.New("the store acknowledged the upload but holds other bytes")

// readBack hashes the stored object and removes it when it is not want.
func (s *Store) readBack(ctx context.Context, full string, want ports.ObjectInfo) error {
	rc, err := s.be.Open(ctx, full, 0, -1)
	if err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	h := sha256.New()
	n, err := io.Copy(h, rc)
	rc.Close()
	if err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != want.Size || got != want.SHA256 {
		mismatch := fmt.Errorf("%w: %d bytes with sha256 %s, want %d bytes with %s", ErrStoredMismatch, n, got, want.Size, want.SHA256)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
		defer cancel()
		// Only an object that still claims to be this upload is removed:
		// another Put of the key may have replaced it meanwhile, and that
		// Put reported its object stored.
		if cur, err := s.be.Stat(rctx, full); err == nil && cur.SHA256 != want.SHA256 {
			return fmt.Errorf("%w (the key now holds another upload, left in place)", mismatch)
		}
		return errors.Join(mismatch, s.be.Remove(rctx, full))
	}
	return nil
}

// Stat returns the object's size, sha256 (empty for objects not written by
// this package) and modification time, or an error wrapping core.ErrNotFound.
func (s *Store) Stat(ctx context.Context, key string) (ports.ObjectInfo, error) {
	full, err := s.fullKey(key)
	if err != nil {
		return ports.ObjectInfo{}, fmt.Errorf("stat artifact: %w", err)
	}
	info, err := s.be.Stat(ctx, full)
	if err != nil {
		return ports.ObjectInfo{}, fmt.Errorf("stat artifact %s: %w", key, err)
	}
	return info, nil
}

// Open reads length bytes from offset (length < 0: to the end). A range
// running past the end is cut short; offset equal to the size gives an empty
// reader and offset beyond it an error wrapping core.ErrInvalidArgument. A
// missing object gives core.ErrNotFound.
func (s *Store) Open(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	full, err := s.fullKey(key)
	if err != nil {
		return nil, fmt.Errorf("open artifact: %w", err)
	}
	if offset < 0 {
		return nil, fmt.Errorf("open artifact %s: %w", key, &core.FieldError{Field: "offset", Reason: fmt.Sprintf("%d is negative", offset)})
	}
	rc, err := s.be.Open(ctx, full, offset, length)
	if err != nil {
		return nil, fmt.Errorf("open artifact %s: %w", key, err)
	}
	return rc, nil
}

// Delete removes the object; a missing object is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	full, err := s.fullKey(key)
	if err != nil {
		return fmt.Errorf("delete artifact: %w", err)
	}
	if err := s.be.Remove(ctx, full); err != nil {
		return fmt.Errorf("delete artifact %s: %w", key, err)
	}
	return nil
}

// List implements ports.ArtifactStore: every object under prefix, keys
// without the store's prefix. Only objects are listed: the file backend's
// temp files and directories are not.
func (s *Store) List(ctx context.Context, prefix string, fn func(key string, info ports.ObjectInfo) error) error {
	if prefix != "" {
		if !strings.HasSuffix(prefix, "/") {
			return fmt.Errorf("list artifacts: %w", &core.FieldError{Field: "prefix", Reason: fmt.Sprintf("%q does not end with /", prefix)})
		}
		if err := ValidateKey(strings.TrimSuffix(prefix, "/")); err != nil {
			return fmt.Errorf("list artifacts: %w", err)
		}
	}
	err := s.be.List(ctx, s.prefix+prefix, func(key string, info ports.ObjectInfo) error {
		return fn(strings.TrimPrefix(key, s.prefix), info)
	})
	if err != nil {
		return fmt.Errorf("list artifacts under %q: %w", prefix, err)
	}
	return nil
}

// SignedURL mints a presigned GET URL valid for ttl (at most 7 days) on S3
// and GCS, fresh on every call and never cached. The file and memory stores
// return an error wrapping core.ErrUnsupported. It does not check that the
// object exists.
func (s *Store) SignedURL(ctx context.Context, key string, ttl time.Duration) (string, error) {
	full, err := s.fullKey(key)
	if err != nil {
		return "", fmt.Errorf("sign artifact URL: %w", err)
	}
	if ttl <= 0 || ttl > maxSignedURLTTL {
		return "", fmt.Errorf("sign artifact URL %s: %w", key, &core.FieldError{Field: "ttl", Reason: fmt.Sprintf("%v is not in (0, %v]", ttl, maxSignedURLTTL)})
	}
	u, err := s.be.SignedURL(ctx, full, ttl)
	if err != nil {
		return "", fmt.Errorf("sign artifact URL %s: %w", key, err)
	}
	return u, nil
}
