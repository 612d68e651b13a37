package artifactstore

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// ErrContentMismatch is wrapped by Put errors when the bytes read do not have
// the expected size or sha256. It wraps core.ErrInvalidArgument: the caller's
// reader and its claim about the reader disagree.
var ErrContentMismatch = fmt.Errorf("content does not match the expected size and sha256: %w", core.ErrInvalidArgument)

// verifier passes r through while counting and hashing it, and turns the end
// of r into an error unless exactly want.Size bytes with sha256 want.SHA256
// went by. A backend that copies until io.EOF therefore never sees a clean end
// for bad content and aborts instead of publishing. It also stops as soon as
// r yields more than want.Size bytes, without passing the excess on.
type verifier struct {
	r    io.Reader
	h    hash.Hash
	n    int64
	want ports.ObjectInfo
	err  error
}

func newVerifier(r io.Reader, want ports.ObjectInfo) *verifier {
	return &verifier{r: r, h: sha256.New(), want: want}
}

func (v *verifier) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	// Ask for at most one byte beyond the expected size: enough to notice a
	// reader that is too long without reading it to its end. (rest+1
	// would overflow for a size near math.MaxInt64; rest < len(p) cannot.)
	if rest := v.want.Size - v.n; int64(len(p)) > rest {
		p = p[:rest+1]
	}
	n, err := v.r.Read(p)
	if v.n+int64(n) > v.want.Size {
		keep := int(v.want.Size - v.n)
		v.h.Write(p[:keep])
		v.n = v.want.Size
		v.err = fmt.Errorf("%w: more than the expected %d bytes", ErrContentMismatch, v.want.Size)
		return keep, v.err
	}
	v.h.Write(p[:n])
	v.n += int64(n)
	switch {
	case err == nil:
		return n, nil
	case errors.Is(err, io.EOF):
		v.err = v.check()
		if v.err == nil {
			v.err = io.EOF
		}
		return n, v.err
	default:
		v.err = fmt.Errorf("reading content: %w", err)
		return n, v.err
	}
}

func (v *verifier) check() error {
	if v.n != v.want.Size {
		return fmt.Errorf("%w: size is %d bytes, want %d", ErrContentMismatch, v.n, v.want.Size)
	}
	if got := hex.EncodeToString(v.h.Sum(nil)); got != v.want.SHA256 {
		return fmt.Errorf("%w: sha256 is %s, want %s", ErrContentMismatch, got, v.want.SHA256)
	}
	return nil
}

// checkWant validates the expected object info given to Put.
func checkWant(want ports.ObjectInfo) error {
	if want.Size < 0 {
		return &core.FieldError{Field: "size", Reason: fmt.Sprintf("%d is negative", want.Size)}
	}
	if !core.IsSHA256Hex(want.SHA256) {
		return &core.FieldError{Field: "sha256", Reason: fmt.Sprintf("%q is not 64 lowercase hex digits", want.SHA256)}
	}
	return nil
}

// writerOnly hides io.ReaderFrom so io.CopyBuffer drives the copy with plain
// Writes and the caller keeps control of when the writer is closed.
type writerOnly struct{ io.Writer }
