package tcapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/artifactstore"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

const testToken = "internal-test-token"

type fakeBuilds struct {
	mu  sync.Mutex
	err error
	got []ports.BuildRequest
}

func (f *fakeBuilds) Submit(ctx context.Context, req ports.BuildRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, req)
	return f.err
}

type fakeDeleter struct {
	err error
	got []string
}

func (f *fakeDeleter) DeleteArtifact(_ context.Context, id string) error {
	f.got = append(f.got, id)
	return f.err
}

type fakeLookup struct {
	rows map[string]*core.Artifact
	err  error
}

func (f *fakeLookup) Get(_ context.Context, id string) (*core.Artifact, error) {
	if f.err != nil {
		return nil, f.err
	}
	a, ok := f.rows[id]
	if !ok {
		return nil, fmt.Errorf("artifact %s: %w", id, core.ErrNotFound)
	}
	c := *a
	return &c, nil
}

type fakeRecorder struct {
	err error
	got []core.UploadedArtifact
}

func (f *fakeRecorder) RecordUpload(_ context.Context, u core.UploadedArtifact) error {
	f.got = append(f.got, u)
	return f.err
}

// signingStore is a real store that also presigns, like S3/GCS.
type signingStore struct {
	ports.ArtifactStore
	mu    sync.Mutex
	calls int
	ttls  []time.Duration
}

func (s *signingStore) SignedURL(_ context.Context, key string, ttl time.Duration) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	s.ttls = append(s.ttls, ttl)
	return fmt.Sprintf("https://bucket.s3.example/%s?X-Amz-Expires=%d&X-Amz-Signature=sig%d", key, int(ttl.Seconds()), s.calls), nil
}

func (s *signingStore) Backend() string { return "s3" }

func fileStore(t *testing.T) *artifactstore.Store { return fileStoreB(t) }

func fileStoreB(t testing.TB) *artifactstore.Store {
	t.Helper()
	st, err := artifactstore.Open(context.Background(), "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func put(t testing.TB, st ports.ArtifactStore, key string, data []byte) {
	t.Helper()
	if err := st.Put(context.Background(), key, bytes.NewReader(data), ports.ObjectInfo{Size: int64(len(data)), SHA256: sum(data)}); err != nil {
		t.Fatal(err)
	}
}

type call struct {
	method, target string
	body           io.Reader
	header         map[string]string
}

func do(t *testing.T, h http.Handler, c call) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(c.method, c.target, c.body)
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func postJSON(t *testing.T, h http.Handler, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	return do(t, h, call{method: http.MethodPost, target: path, body: bytes.NewBufferString(body),
		header: map[string]string{auth.Header: testToken, "Content-Type": "application/json"}})
}

func jsonBody(t *testing.T, rec *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
		t.Fatalf("body %q is not JSON: %v", rec.Body.String(), err)
	}
	return m
}
