package artifactstore

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob"

	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/artifactstoretest"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// urlHarness opens a store from a URL; file and mem need nothing else.
type urlHarness struct {
	url    string
	signed bool
	stores []*Store
}

func (h *urlHarness) MakeStore(ctx context.Context) (ports.ArtifactStore, error) {
	s, err := Open(ctx, h.url)
	if err != nil {
		return nil, err
	}
	h.stores = append(h.stores, s)
	return s, nil
}

func (h *urlHarness) SupportsSignedURL() bool { return h.signed }

// Backend is the kind a store opened from the URL must report: its scheme.
func (h *urlHarness) Backend() string { return h.url[:strings.Index(h.url, "://")] }

func (h *urlHarness) Close() {
	for _, s := range h.stores {
		_ = s.Close()
	}
}

func TestConformanceFile(t *testing.T) {
	artifactstoretest.RunConformanceTests(t, func(_ context.Context, t *testing.T) (artifactstoretest.Harness, error) {
		return &urlHarness{url: "file://" + t.TempDir()}, nil
	})
}

func TestConformanceFileWithPrefix(t *testing.T) {
	artifactstoretest.RunConformanceTests(t, func(_ context.Context, t *testing.T) (artifactstoretest.Harness, error) {
		return &urlHarness{url: "file://" + t.TempDir() + "/made/here?create_dir=true&prefix=" + url.QueryEscape("tenant/a")}, nil
	})
}

func TestConformanceMem(t *testing.T) {
	artifactstoretest.RunConformanceTests(t, func(context.Context, *testing.T) (artifactstoretest.Harness, error) {
		return &urlHarness{url: "mem://?prefix=p"}, nil
	})
}

// s3Harness runs against the real MinIO of the test servers, under a prefix
// unique to the harness, and deletes everything below it on Close.
type s3Harness struct {
	t      *testing.T
	cfg    S3Config
	stores []*Store
}

func newS3Harness(_ context.Context, t *testing.T) (artifactstoretest.Harness, error) {
	return &s3Harness{t: t, cfg: testS3Config(t)}, nil
}

func testS3Config(t *testing.T) S3Config {
	t.Helper()
	return S3Config{
		Endpoint:     testenv.Get(t, testenv.S3Endpoint),
		Bucket:       testenv.Get(t, testenv.S3Bucket),
		AccessKey:    testenv.Get(t, testenv.S3AccessKey),
		SecretKey:    testenv.Get(t, testenv.S3SecretKey),
		UsePathStyle: true,
		Prefix:       "artifactstore-test-" + randomHex(),
	}
}

func (h *s3Harness) MakeStore(ctx context.Context) (ports.ArtifactStore, error) {
	s, err := OpenS3(ctx, h.cfg)
	if err != nil {
		return nil, err
	}
	h.stores = append(h.stores, s)
	return s, nil
}

func (h *s3Harness) SupportsSignedURL() bool { return true }

func (h *s3Harness) Backend() string { return BackendS3 }

func (h *s3Harness) Close() {
	for _, s := range h.stores {
		cleanPrefix(h.t, s)
		_ = s.Close()
	}
}

// cleanPrefix deletes every object under the store's prefix and aborts
// multipart uploads left open there (a failing test might leave some).
func cleanPrefix(t *testing.T, s *Store) {
	bb := s.be.(*bucketBackend)
	ctx := context.Background()
	it := bb.b.List(&blob.ListOptions{Prefix: s.prefix})
	for {
		obj, err := it.Next(ctx)
		if err != nil {
			break
		}
		if err := bb.b.Delete(ctx, obj.Key); err != nil {
			t.Logf("cleanup %s: %v", obj.Key, err)
		}
	}
	if bb.s3 == nil {
		return
	}
	bucket := aws.String(testS3Config(t).Bucket)
	// MinIO lists uploads by exact key only, so list them all and filter.
	out, err := bb.s3.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: bucket})
	if err != nil {
		t.Logf("cleanup: list multipart uploads: %v", err)
		return
	}
	for _, u := range out.Uploads {
		if strings.HasPrefix(aws.ToString(u.Key), s.prefix) {
			_, _ = bb.s3.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: bucket, Key: u.Key, UploadId: u.UploadId})
		}
	}
}

func TestConformanceS3(t *testing.T) {
	artifactstoretest.RunConformanceTests(t, newS3Harness)
}
