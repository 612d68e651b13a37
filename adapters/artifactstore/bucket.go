package artifactstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/gcerrors"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

const (
	// shaMetadataKey is the object metadata entry holding the sha256 (S3
	// sends it as x-amz-meta-sha256).
	shaMetadataKey = "sha256"
	// DefaultPartSize is the multipart upload part (S3) or chunk (GCS) size.
	DefaultPartSize = 16 << 20
	// maxParts leaves headroom under S3's limit of 10,000 parts per upload.
	maxParts = 9000
	// uploadConcurrency bounds parts in flight per upload; memory per upload
	// is about (uploadConcurrency+1) * part size.
	uploadConcurrency = 4
	copyBufferSize    = 1 << 20
	abortTimeout      = 30 * time.Second
)

// memScheme is mem://: a bucket in this process's memory (tests, demos).
var memScheme = Scheme{Name: BackendMem, Parse: func(_ *url.URL, q url.Values) (Opener, error) { return memURL{}, onlyParams(q) }}

type memURL struct{}

func (memURL) Open(context.Context) (Driver, error) {
	return &bucketBackend{b: memblob.OpenBucket(nil), partSize: DefaultPartSize}, nil
}

// bucketBackend stores objects through gocloud.dev/blob (S3, GCS, memory).
type bucketBackend struct {
	b        *blob.Bucket
	partSize int64
	canSign  bool
	s3       *s3.Client // set for S3, to abort failed multipart uploads
}

// partSizeFor grows the part size for objects so large that the default
// would need more parts than S3 allows; the size is known before the upload.
func (bb *bucketBackend) partSizeFor(size int64) int64 {
	ps := bb.partSize
	if need := size/maxParts + 1; need > ps {
		ps = (need + 1<<20 - 1) &^ (1<<20 - 1) // round up to a MiB
	}
	return ps
}

func (bb *bucketBackend) Put(ctx context.Context, key string, src io.Reader, want ports.ObjectInfo) error {
	// Cancelling wctx before Close is gocloud's way to abort a write: no
	// object appears (S3 multipart uploads are not completed, single PUTs
	// never start, memblob drops the buffer).
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var upload *transfermanager.UploadObjectInput // S3 only: the request as sent
	w, err := bb.b.NewWriter(wctx, key, &blob.WriterOptions{
		ContentType:    "application/octet-stream",
		Metadata:       map[string]string{shaMetadataKey: want.SHA256},
		BufferSize:     int(bb.partSizeFor(want.Size)),
		MaxConcurrency: uploadConcurrency,
		BeforeWrite: func(as func(any) bool) error {
			as(&upload)
			return nil
		},
	})
	if err != nil {
		return classify(err)
	}
	buf := make([]byte, copyBufferSize)
	if _, err := io.CopyBuffer(writerOnly{w}, ctxReader{ctx, src}, buf); err != nil {
		cancel()
		return errors.Join(classify(err), bb.abandon(ctx, upload, w.Close()))
	}
	if err := w.Close(); err != nil {
		return errors.Join(classify(err), bb.abandon(ctx, upload, err))
	}
	return nil
}

// abandon aborts the S3 multipart upload a failed write left open. The
// transfer manager tries too, but with the write's context, which is already
// cancelled when we abort on purpose; an open upload is invisible yet keeps
// its parts (and their cost) until a lifecycle rule removes them. Only the
// failed upload's own id is aborted, so concurrent writers of the same key
// are unaffected.
func (bb *bucketBackend) abandon(ctx context.Context, in *transfermanager.UploadObjectInput, closeErr error) error {
	var failed transfermanager.MultipartUploadError
	if bb.s3 == nil || in == nil || !errors.As(closeErr, &failed) || failed.UploadID() == "" {
		return nil
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
	defer cancel()
	_, err := bb.s3.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{
		Bucket:   in.Bucket,
		Key:      in.Key,
		UploadId: aws.String(failed.UploadID()),
	})
	var gone *s3types.NoSuchUpload
	if err != nil && !errors.As(err, &gone) {
		return fmt.Errorf("abort multipart upload %s (its parts stay until a lifecycle rule removes them): %w", failed.UploadID(), err)
	}
	return nil
}

func (bb *bucketBackend) Stat(ctx context.Context, key string) (ports.ObjectInfo, error) {
	a, err := bb.b.Attributes(ctx, key)
	if err != nil {
		return ports.ObjectInfo{}, classify(err)
	}
	info := ports.ObjectInfo{Size: a.Size, ModTime: a.ModTime}
	if sha := a.Metadata[shaMetadataKey]; core.IsSHA256Hex(sha) {
		info.SHA256 = sha
	}
	return info, nil
}

func (bb *bucketBackend) Open(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if length == 0 {
		// S3 cannot serve an empty range; all that is left to check is that
		// the object exists and the offset is inside it.
		a, err := bb.b.Attributes(ctx, key)
		if err != nil {
			return nil, classify(err)
		}
		if offset > a.Size {
			return nil, offsetPastEnd(offset, a.Size)
		}
		return io.NopCloser(http.NoBody), nil
	}
	r, err := bb.b.NewRangeReader(ctx, key, offset, length, nil)
	if err != nil {
		if gcerrors.Code(err) == gcerrors.NotFound || offset == 0 {
			return nil, classify(err)
		}
		// S3 refuses a range starting at or past the end (416); look at the
		// size to tell an empty tail from a bad offset.
		a, aerr := bb.b.Attributes(ctx, key)
		if aerr != nil {
			return nil, classify(aerr)
		}
		if offset == a.Size {
			return io.NopCloser(http.NoBody), nil
		}
		if offset > a.Size {
			return nil, offsetPastEnd(offset, a.Size)
		}
		return nil, classify(err)
	}
	if offset > r.Size() {
		_ = r.Close()
		return nil, offsetPastEnd(offset, r.Size())
	}
	return r, nil
}

func offsetPastEnd(offset, size int64) error {
	return &core.FieldError{Field: "offset", Reason: fmt.Sprintf("%d is past the end of the %d-byte object", offset, size)}
}

func (bb *bucketBackend) Remove(ctx context.Context, key string) error {
	if err := bb.b.Delete(ctx, key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return classify(err)
	}
	return nil
}

func (bb *bucketBackend) List(ctx context.Context, prefix string, fn func(key string, info ports.ObjectInfo) error) error {
	it := bb.b.List(&blob.ListOptions{Prefix: prefix})
	for {
		o, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return classify(err)
		}
		if o.IsDir {
			continue
		}
		if err := fn(o.Key, ports.ObjectInfo{Size: o.Size, ModTime: o.ModTime}); err != nil {
			return err
		}
	}
}

func (bb *bucketBackend) SignedURL(ctx context.Context, key string, ttl time.Duration) (string, error) {
	if !bb.canSign {
		return "", fmt.Errorf("signed URLs: %w", core.ErrUnsupported)
	}
	u, err := bb.b.SignedURL(ctx, key, &blob.SignedURLOptions{Expiry: ttl, Method: http.MethodGet})
	if err != nil {
		return "", classify(err)
	}
	return u, nil
}

func (bb *bucketBackend) Close() error { return bb.b.Close() }

// classify adds the core sentinel matching a gocloud error code, keeping the
// original error (which names the key but no credentials) in the chain.
func classify(err error) error {
	switch gcerrors.Code(err) {
	case gcerrors.NotFound:
		return fmt.Errorf("%w: %w", core.ErrNotFound, err)
	case gcerrors.InvalidArgument:
		return fmt.Errorf("%w: %w", core.ErrInvalidArgument, err)
	case gcerrors.Unimplemented:
		return fmt.Errorf("%w: %w", core.ErrUnsupported, err)
	}
	return err
}
