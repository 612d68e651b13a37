package tcclient_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/artifactstore"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/tcapi"
	"github.com/cubesandbox/templatecenter/adapters/httpapi/tcclient"
	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/core/data"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/dataplanetest"
)

// TestConformance runs the DataPlane suite against the real templatecenter
// router: a SQLite store behind the real upload recorder and deleter, and
// a file artifact store. Only the build executor is replaced (see
// recordingBuilds): building images is not what the client is tested for.
func TestConformance(t *testing.T) {
	dataplanetest.RunConformanceTests(t, newHarness)
}

const callbackToken = "tc-conformance-callback-token"

type harness struct {
	st       *entstore.Store
	blobs    *artifactstore.Store
	srv      *httptest.Server
	builds   *recordingBuilds
	requests atomic.Int64
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newHarness(ctx context.Context, t *testing.T) (dataplanetest.Harness, error) {
	dir := t.TempDir()
	st, err := entstore.Open(ctx, "sqlite://"+filepath.Join(dir, "tc.db"))
	if err != nil {
		return nil, err
	}
	if _, err := st.Migrate(ctx); err != nil {
		st.Close()
		return nil, err
	}
	blobs, err := artifactstore.Open(ctx, "file://"+filepath.Join(dir, "artifacts")+"?create_dir=true")
	if err != nil {
		st.Close()
		return nil, err
	}
	h := &harness{st: st, blobs: blobs, builds: &recordingBuilds{capacity: -1}}
	deleter := &data.Deleter{Store: st, Artifacts: blobs}
	router := tcapi.New(tcapi.Config{
		Token:     callbackToken,
		Builds:    h.builds,
		Deleter:   deleterFunc(deleter.Delete),
		Artifacts: st.Artifacts(),
		Store:     blobs,
		Uploads:   data.UploadRecorder{Artifacts: st.Artifacts()},
		Logger:    quietLogger(),
	})
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.requests.Add(1)
		router.ServeHTTP(w, r)
	}))
	return h, nil
}

func (h *harness) MakeDataPlane(context.Context) (ports.DataPlane, error) {
	return tcclient.New(tcclient.Config{
		BaseURL: h.srv.URL,
		Token:   callbackToken,
		Logger:  quietLogger(),
		// Retries are the client's own business; keep their waits short.
		Sleep: func(ctx context.Context, d time.Duration) error {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(d / 100):
				return nil
			}
		},
	})
}

func (h *harness) SetBuildCapacity(n int)       { h.builds.setCapacity(n) }
func (h *harness) Builds() []ports.BuildRequest { return h.builds.taken() }
func (h *harness) Requests() int                { return int(h.requests.Load()) }
func (h *harness) Secrets() []string            { return []string{callbackToken} }
func (h *harness) Artifact(ctx context.Context, id string) (*core.Artifact, error) {
	return h.st.Artifacts().Get(ctx, id)
}

func (h *harness) SeedArtifact(ctx context.Context, a *core.Artifact, b []byte) error {
	if err := h.st.Artifacts().Create(ctx, a); err != nil {
		return err
	}
	if b == nil {
		return nil
	}
	sum, n, err := core.SHA256Of(bytes.NewReader(b))
	if err != nil {
		return err
	}
	return h.blobs.Put(ctx, core.ObjectKeyOf(a), bytes.NewReader(b), ports.ObjectInfo{Size: n, SHA256: sum})
}

// Stored reads the object the row names, or the default key once the row
// is gone.
func (h *harness) Stored(ctx context.Context, id string) (*dataplanetest.StoredCopy, error) {
	key := core.ArtifactObjectKey(id)
	if a, err := h.st.Artifacts().Get(ctx, id); err == nil {
		key = core.ObjectKeyOf(a)
	} else if !errors.Is(err, core.ErrNotFound) {
		return nil, err
	}
	rc, err := h.blobs.Open(ctx, key, 0, -1)
	if errors.Is(err, core.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, err
	}
	return &dataplanetest.StoredCopy{Object: ports.StoredObject{ObjectKey: key, StorageBackend: h.blobs.Backend()}, Data: b}, nil
}

func (h *harness) Close() {
	h.srv.Close()
	h.blobs.Close()
	h.st.Close()
}

type deleterFunc func(ctx context.Context, artifactID string) error

func (f deleterFunc) DeleteArtifact(ctx context.Context, id string) error { return f(ctx, id) }

// recordingBuilds stands in for the data plane's build executor: it takes
// builds up to its capacity and keeps them in flight, answering the way
// the executor does (a job in flight is a conflict, checked before the
// capacity).
type recordingBuilds struct {
	mu       sync.Mutex
	capacity int // < 0: unlimited
	inflight map[string]bool
	got      []ports.BuildRequest
}

func (b *recordingBuilds) Submit(_ context.Context, req ports.BuildRequest) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.inflight[req.JobID]:
		return fmt.Errorf("job %s is already building here: %w", req.JobID, core.ErrConflict)
	case b.capacity >= 0 && len(b.inflight) >= b.capacity:
		return fmt.Errorf("%d builds running, the limit: %w", len(b.inflight), core.ErrBusy)
	}
	if b.inflight == nil {
		b.inflight = map[string]bool{}
	}
	b.inflight[req.JobID] = true
	b.got = append(b.got, req)
	return nil
}

func (b *recordingBuilds) setCapacity(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.capacity = n
}

func (b *recordingBuilds) taken() []ports.BuildRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]ports.BuildRequest(nil), b.got...)
}
