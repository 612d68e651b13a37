package registry

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/layercache"
	"github.com/cubesandbox/templatecenter/ports"
)

// stream resolves refStr and starts streaming its layers.
func stream(t *testing.T, s *Source, refStr string) ([]ports.StreamedLayer, func() ([]ports.LocalLayer, error)) {
	t.Helper()
	req := ports.ImageRequest{Ref: refStr}
	img, err := s.Resolve(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ls, wait, err := s.StreamLayers(ctx, req, img, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ls, wait
}

func readAllConcurrently(ls []ports.StreamedLayer) ([][]byte, []error) {
	out := make([][]byte, len(ls))
	errs := make([]error, len(ls))
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Go(func() {
			out[i], errs[i] = io.ReadAll(l.Blob)
			l.Blob.Close()
		})
	}
	wg.Wait()
	return out, errs
}

// TestStreamLayersFollowsTheDownload: readers get every byte while the
// registry sends the blob slowly, io.EOF only at the verified end, and
// wait returns the cached layers.
func TestStreamLayersFollowsTheDownload(t *testing.T) {
	reg := newFakeRegistry(t)
	rc := pusher(reg.host)
	layers := []testLayer{makeLayer(t, 300_000, compGzip, false), makeLayer(t, 200_000, compNone, false), makeLayer(t, 300_000, compGzip, false)}
	layers = append(layers, layers[0]) // the same blob twice
	refStr := reg.host + "/" + uniqueRepo("stream") + ":v1"
	pushImage(t, rc, refStr, testImage{layers: layers})
	slow := layers[2].desc().Digest
	reg.setFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		if !isBlobGet(r, slow) {
			return false
		}
		b := blobBytes(next, r)
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusOK)
		for off := 0; off < len(b); off += 32 << 10 {
			w.Write(b[off:min(off+32<<10, len(b))])
			w.(http.Flusher).Flush()
			time.Sleep(5 * time.Millisecond)
		}
		return true
	})
	cache, err := layercache.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	s := newTestSource(t, cache, nil, reg.host)
	ls, wait := stream(t, s, refStr)
	if len(ls) != len(layers) {
		t.Fatalf("%d streamed layers, want %d", len(ls), len(layers))
	}
	got, errs := readAllConcurrently(ls)
	for i := range ls {
		if errs[i] != nil {
			t.Fatalf("layer %d: %v", i, errs[i])
		}
		if !bytes.Equal(got[i], layers[i].blob) {
			t.Fatalf("layer %d: %d bytes differ from the blob (%d)", i, len(got[i]), len(layers[i].blob))
		}
		if ls[i].DiffID != layers[i].diffID.String() || ls[i].Derived == nil {
			t.Fatalf("layer %d: diff_id %s, derived %v", i, ls[i].DiffID, ls[i].Derived)
		}
	}
	local, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	checkFetched(t, local, layers)

	// Cached now: a second stream needs no blob request.
	reg.resetRequests()
	ls, wait = stream(t, s, refStr)
	got, errs = readAllConcurrently(ls)
	for i := range ls {
		if errs[i] != nil || !bytes.Equal(got[i], layers[i].blob) {
			t.Fatalf("cached layer %d: %v", i, errs[i])
		}
	}
	if _, err := wait(); err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		if n := len(reg.blobGets(l.desc().Digest)); n != 0 {
			t.Fatalf("%d blob requests for a cached layer", n)
		}
	}
}

// TestStreamLayersBadBlob: a blob that does not match its digest is a read
// error for its reader (never io.EOF), wait reports it, and nothing is
// cached.
func TestStreamLayersBadBlob(t *testing.T) {
	reg := newFakeRegistry(t)
	rc := pusher(reg.host)
	layers := []testLayer{makeLayer(t, 50_000, compNone, false)}
	refStr := reg.host + "/" + uniqueRepo("badstream") + ":v1"
	pushImage(t, rc, refStr, testImage{layers: layers})
	d := layers[0].desc().Digest
	flipped := bytes.Clone(layers[0].blob)
	flipped[100] ^= 1
	reg.setFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		if !isBlobGet(r, d) {
			return false
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(flipped)))
		w.Write(flipped)
		return true
	})
	cache, err := layercache.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	ls, wait := stream(t, newTestSource(t, cache, func(o *Options) { o.Retries = 0 }, reg.host), refStr)
	_, errs := readAllConcurrently(ls)
	if errs[0] == nil {
		t.Fatal("reader of a bad blob ended without an error")
	}
	if _, err := wait(); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("wait = %v, want ErrDigestMismatch", err)
	}
	if _, ok, _ := cache.Get(d); ok {
		t.Fatal("bad blob cached")
	}
}

// TestStreamReaderCloseWakesRead: closing a reader that waits for bytes
// ends its Read.
func TestStreamReaderCloseWakesRead(t *testing.T) {
	st := newBlobStream()
	r := st.reader()
	done := make(chan error, 1)
	go func() {
		_, err := r.Read(make([]byte, 10))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	r.Close()
	select {
	case err := <-done:
		if !errors.Is(err, errReaderClosed) {
			t.Fatalf("Read = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Read still waiting after Close")
	}
}

// TestStreamLeaseEnds: the lease pinning the streamed blobs ends with the
// caller's context, or in wait when that context can never end
// (context.Background); after it a full cache evicts them.
func TestStreamLeaseEnds(t *testing.T) {
	reg := newFakeRegistry(t)
	rc := pusher(reg.host)
	layers := []testLayer{makeLayer(t, 20_000, compNone, false)}
	refStr := reg.host + "/" + uniqueRepo("lease") + ":v1"
	pushImage(t, rc, refStr, testImage{layers: layers})
	d := layers[0].desc().Digest

	for _, c := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		// pinnedAfterWait: the layers wait returned stay pinned until
		// the context ends.
		pinnedAfterWait bool
	}{
		{"background", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }, false},
		{"cancellable", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A cap of one byte: whatever is not pinned is evicted.
			cache, err := layercache.Open(t.TempDir(), 1)
			if err != nil {
				t.Fatal(err)
			}
			cached := func() bool {
				t.Helper()
				if _, err := cache.Evict(); err != nil {
					t.Fatal(err)
				}
				_, ok, err := cache.Get(d)
				if err != nil {
					t.Fatal(err)
				}
				return ok
			}
			s := newTestSource(t, cache, nil, reg.host)
			req := ports.ImageRequest{Ref: refStr}
			img, err := s.Resolve(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := c.ctx()
			defer cancel()
			ls, wait, err := s.StreamLayers(ctx, req, img, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, errs := readAllConcurrently(ls); errs[0] != nil {
				t.Fatal(errs[0])
			}
			if _, err := wait(); err != nil {
				t.Fatal(err)
			}
			// Checked at once: a leaked lease is unreachable after this,
			// and the garbage collector closing its files would hide it.
			if got := cached(); got != c.pinnedAfterWait {
				t.Fatalf("blob cached after wait = %v, want %v", got, c.pinnedAfterWait)
			}
			runtime.KeepAlive(wait)
			cancel()
			// The context's end releases the lease from its own goroutine.
			for deadline := time.Now().Add(10 * time.Second); cached(); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("blob still pinned after the context ended")
				}
			}
		})
	}
}
