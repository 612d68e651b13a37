package artifactstore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports/artifactstoretest"
)

func openTestS3(t *testing.T) *Store {
	t.Helper()
	s, err := OpenS3(context.Background(), testS3Config(t))
	if err != nil {
		t.Fatalf("OpenS3: %v", err)
	}
	t.Cleanup(func() {
		cleanPrefix(t, s)
		_ = s.Close()
	})
	return s
}

func s3Client(t *testing.T, s *Store) *s3.Client {
	t.Helper()
	var c *s3.Client
	if !s.be.(*bucketBackend).b.As(&c) {
		t.Fatal("bucket is not backed by an *s3.Client")
	}
	return c
}

// pendingUploads lists multipart uploads still open for key; an aborted Put
// must not leave any (they are invisible but keep their parts). MinIO lists
// uploads only for an exact key, not for a prefix, so ask per key.
func pendingUploads(t *testing.T, s *Store, key string) []string {
	t.Helper()
	out, err := s3Client(t, s).ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{
		Bucket: aws.String(testS3Config(t).Bucket),
		Prefix: aws.String(s.prefix + key),
	})
	if err != nil {
		t.Fatalf("ListMultipartUploads: %v", err)
	}
	var ids []string
	for _, u := range out.Uploads {
		ids = append(ids, aws.ToString(u.Key)+" "+aws.ToString(u.UploadId))
	}
	return ids
}

// largeData is bigger than two parts, so the upload is multipart.
func largeData() []byte {
	b := make([]byte, artifactstoretest.LargeObjectSize)
	for i := range b {
		b[i] = byte(i * 7 / 13)
	}
	return b
}

func TestS3LargeObjectIsMultipart(t *testing.T) {
	s := openTestS3(t)
	ctx := context.Background()
	data := largeData()
	if err := s.Put(ctx, "big", bytes.NewReader(data), info(data)); err != nil {
		t.Fatal(err)
	}
	a, err := s.be.(*bucketBackend).b.Attributes(ctx, s.prefix+"big")
	if err != nil {
		t.Fatal(err)
	}
	// A multipart ETag is "<md5 of part md5s>-<parts>": 40 MiB in 16 MiB parts.
	if !strings.HasSuffix(strings.Trim(a.ETag, `"`), "-3") {
		t.Errorf("ETag = %s, want a 3-part multipart ETag", a.ETag)
	}
	if a.Metadata[shaMetadataKey] != info(data).SHA256 {
		t.Errorf("metadata = %v, want sha256 %s", a.Metadata, info(data).SHA256)
	}
}

// TestS3AbortedMultipartLeavesNothing fails large uploads after parts have
// been sent and checks that no object and no open multipart upload remain.
func TestS3AbortedMultipartLeavesNothing(t *testing.T) {
	s := openTestS3(t)
	data := largeData()
	wrong := info(data)
	wrong.SHA256 = strings.Repeat("0", 64)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		r    io.Reader
	}{
		{"sha256 mismatch", context.Background(), bytes.NewReader(data)},
		{"source fails after 36 MiB", context.Background(), io.MultiReader(bytes.NewReader(data[:36<<20]), errReader{})},
		{"cancelled after 36 MiB", ctx, io.MultiReader(bytes.NewReader(data[:36<<20]), cancelThenEOF{cancel})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "aborted-" + strings.ReplaceAll(tc.name, " ", "-")
			want := info(data)
			if tc.name == "sha256 mismatch" {
				want = wrong
			}
			if err := s.Put(tc.ctx, key, tc.r, want); err == nil {
				t.Fatal("Put succeeded")
			}
			if _, err := s.Stat(context.Background(), key); !errors.Is(err, core.ErrNotFound) {
				t.Fatalf("Stat after failed Put = %v, want not found", err)
			}
			if ups := pendingUploads(t, s, key); len(ups) != 0 {
				t.Fatalf("multipart uploads left open: %v", ups)
			}
		})
	}
}

// TestS3PendingUploadsSeesOpenUploads keeps the check above honest: an
// upload left open on purpose must be reported.
func TestS3PendingUploadsSeesOpenUploads(t *testing.T) {
	s := openTestS3(t)
	c := s3Client(t, s)
	bucket := aws.String(testS3Config(t).Bucket)
	key := aws.String(s.prefix + "left-open")
	out, err := c.CreateMultipartUpload(context.Background(), &s3.CreateMultipartUploadInput{Bucket: bucket, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	defer c.AbortMultipartUpload(context.Background(), &s3.AbortMultipartUploadInput{Bucket: bucket, Key: key, UploadId: out.UploadId})
	if ups := pendingUploads(t, s, "left-open"); len(ups) != 1 {
		t.Fatalf("pendingUploads = %v, want the one left open", ups)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("source died") }

type cancelThenEOF struct{ cancel context.CancelFunc }

func (c cancelThenEOF) Read([]byte) (int, error) { c.cancel(); return 0, io.EOF }

// TestS3OpenURL opens MinIO through an s3:// URL with the credentials in the
// standard AWS variables, as a deployment would.
func TestS3OpenURL(t *testing.T) {
	cfg := testS3Config(t)
	t.Setenv("AWS_ACCESS_KEY_ID", cfg.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", cfg.SecretKey)
	host := strings.TrimPrefix(strings.TrimPrefix(cfg.Endpoint, "http://"), "https://")
	raw := "s3://" + cfg.Bucket + "?endpoint=" + host + "&use_path_style=true&disable_https=true&region=us-east-1&prefix=" + cfg.Prefix
	s, err := Open(context.Background(), raw)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer func() { cleanPrefix(t, s); _ = s.Close() }()
	if s.Backend() != BackendS3 {
		t.Errorf("Backend() = %q", s.Backend())
	}
	ctx := context.Background()
	data := []byte("via url")
	if err := s.Put(ctx, "k", bytes.NewReader(data), info(data)); err != nil {
		t.Fatal(err)
	}
	got, err := s.Stat(ctx, "k")
	if err != nil || got.SHA256 != info(data).SHA256 || got.Size != int64(len(data)) {
		t.Fatalf("Stat = %+v, %v", got, err)
	}
	// The object really is under the prefix in the bucket.
	if _, err := s3Client(t, s).HeadObject(ctx, &s3.HeadObjectInput{
		Bucket: aws.String(cfg.Bucket), Key: aws.String(cfg.Prefix + "/k"),
	}); err != nil {
		t.Fatalf("HeadObject(%s/k): %v", cfg.Prefix, err)
	}
}

func TestS3WrongCredentialsDoNotLeak(t *testing.T) {
	cfg := testS3Config(t)
	cfg.SecretKey = "WRONGSECRETVALUE"
	s, err := OpenS3(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	data := []byte("x")
	err = s.Put(context.Background(), "k", bytes.NewReader(data), info(data))
	if err == nil {
		t.Fatal("Put with a wrong secret succeeded")
	}
	if strings.Contains(err.Error(), cfg.SecretKey) {
		t.Fatalf("error leaks the secret: %v", err)
	}
}
