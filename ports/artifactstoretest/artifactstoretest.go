package artifactstoretest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	mrand "math/rand/v2"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// Harness makes stores for one adapter.
type Harness interface {
	// MakeStore returns a store. Stores of one harness may share a bucket;
	// the suite uses keys unique to each run.
	MakeStore(ctx context.Context) (ports.ArtifactStore, error)
	// SupportsSignedURL reports whether SignedURL should mint URLs (true) or
	// return core.ErrUnsupported (false).
	SupportsSignedURL() bool
	// Close releases what the harness opened and removes what it stored.
	Close()
}

// SignedURLClient is an optional Harness capability: the HTTP client the
// suite fetches signed URLs with. An emulator signs URLs for the real
// service's scheme and host; its harness supplies a client that reaches the
// emulator instead. Without it the suite uses http.DefaultClient.
type SignedURLClient interface {
	SignedURLClient() *http.Client
}

// BackendNamer is an optional Harness capability: the kind its stores'
// Backend must report. Without it the suite checks only that the name is
// shaped like a URL scheme.
type BackendNamer interface {
	Backend() string
}

// HarnessMaker returns a fresh Harness for one subtest.
type HarnessMaker func(ctx context.Context, t *testing.T) (Harness, error)

// LargeObjectSize is the size of the object that exercises multipart
// uploads (more than two 16 MiB parts).
const LargeObjectSize = 40 << 20

const testTimeout = 2 * time.Minute

type env struct {
	ctx    context.Context
	h      Harness
	s      ports.ArtifactStore
	prefix string
}

// key returns a key unique to this run and subtest.
func (e *env) key(name string) string { return e.prefix + name }

// RunConformanceTests runs the suite against the adapter newHarness builds.
func RunConformanceTests(t *testing.T, newHarness HarnessMaker) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"PutStatOpen", testPutStatOpen},
		{"RangedOpen", testRangedOpen},
		{"SHA256MismatchPublishesNothing", testSHAMismatch},
		{"SizeMismatchPublishesNothing", testSizeMismatch},
		{"OversizedReaderIsCutOff", testOversizedReader},
		{"FailedPutKeepsExistingObject", testFailedPutKeepsExisting},
		{"ReaderErrorPublishesNothing", testReaderError},
		{"CancelledPutPublishesNothing", testCancelledPut},
		{"Overwrite", testOverwrite},
		{"ConcurrentPutsSameKey", testConcurrentSameKey},
		{"ConcurrentPutsDifferentKeys", testConcurrentKeys},
		{"DeleteIsIdempotent", testDelete},
		{"List", testList},
		{"NotFound", testNotFound},
		{"InvalidKeys", testInvalidKeys},
		{"InvalidExpectation", testInvalidWant},
		{"EmptyObject", testEmptyObject},
		{"LargeObject", testLargeObject},
		{"SignedURL", testSignedURL},
		{"Backend", testBackend},
	}
	run := randomHex(4)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			t.Cleanup(cancel)
			h, err := newHarness(ctx, t)
			if err != nil {
				t.Fatalf("new harness: %v", err)
			}
			t.Cleanup(h.Close)
			s, err := h.MakeStore(ctx)
			if err != nil {
				t.Fatalf("MakeStore: %v", err)
			}
			tc.fn(t, &env{ctx: ctx, h: h, s: s, prefix: "conformance-" + run + "/" + strings.ToLower(tc.name) + "/"})
		})
	}
}

// --- helpers ---------------------------------------------------------------

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// content returns n pseudo-random bytes, different for each seed.
func content(seed uint64, n int) []byte {
	r := mrand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), 0xc0, 0xbe})
	b := make([]byte, n)
	_, _ = r.Read(b)
	return b
}

func infoOf(b []byte) ports.ObjectInfo {
	sum := sha256.Sum256(b)
	return ports.ObjectInfo{Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}
}

func mustPut(t *testing.T, e *env, key string, data []byte) {
	t.Helper()
	if err := e.s.Put(e.ctx, key, bytes.NewReader(data), infoOf(data)); err != nil {
		t.Fatalf("Put(%q, %d bytes): %v", key, len(data), err)
	}
	t.Cleanup(func() { _ = e.s.Delete(context.Background(), key) })
}

func read(t *testing.T, e *env, key string, offset, length int64) []byte {
	t.Helper()
	rc, err := e.s.Open(e.ctx, key, offset, length)
	if err != nil {
		t.Fatalf("Open(%q, %d, %d): %v", key, offset, length, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading %q [%d,+%d): %v", key, offset, length, err)
	}
	return b
}

func wantContent(t *testing.T, e *env, key string, data []byte) {
	t.Helper()
	info, err := e.s.Stat(e.ctx, key)
	if err != nil {
		t.Fatalf("Stat(%q): %v", key, err)
	}
	want := infoOf(data)
	if info.Size != want.Size || info.SHA256 != want.SHA256 {
		t.Fatalf("Stat(%q) = size %d sha256 %s, want size %d sha256 %s", key, info.Size, info.SHA256, want.Size, want.SHA256)
	}
	if got := read(t, e, key, 0, -1); !bytes.Equal(got, data) {
		t.Fatalf("Open(%q) returned %d bytes (sha256 %s), want %d bytes (sha256 %s)",
			key, len(got), infoOf(got).SHA256, len(data), want.SHA256)
	}
}

func wantAbsent(t *testing.T, e *env, key string) {
	t.Helper()
	if info, err := e.s.Stat(e.ctx, key); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Stat(%q) = %+v, %v; want an error wrapping core.ErrNotFound", key, info, err)
	}
	rc, err := e.s.Open(e.ctx, key, 0, -1)
	if err == nil {
		_ = rc.Close()
	}
	if !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Open(%q) error = %v, want one wrapping core.ErrNotFound", key, err)
	}
}

func wantErrIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error = %v, want one wrapping %q", what, err, target)
	}
}

// failingReader yields data and then, instead of io.EOF, err.
type failingReader struct {
	data []byte
	err  error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// --- tests -----------------------------------------------------------------

func testPutStatOpen(t *testing.T, e *env) {
	data := content(1, 100_000)
	key := e.key("dir/sub/object.ext4")
	wantAbsent(t, e, key)
	mustPut(t, e, key, data)
	wantContent(t, e, key, data)
	info, err := e.s.Stat(e.ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if info.ModTime.IsZero() {
		t.Errorf("Stat(%q).ModTime is zero", key)
	}
}

func testRangedOpen(t *testing.T, e *env) {
	const size = 10_000
	data := content(2, size)
	key := e.key("ranged")
	mustPut(t, e, key, data)
	for _, tc := range []struct {
		name           string
		offset, length int64
		want           []byte
	}{
		{"first byte", 0, 1, data[:1]},
		{"middle", 4000, 100, data[4000:4100]},
		{"last byte", size - 1, 1, data[size-1:]},
		{"length past end", size - 5, 100, data[size-5:]},
		{"offset to end", 7000, -1, data[7000:]},
		{"whole by length", 0, size, data},
		{"zero length", 10, 0, nil},
		{"offset at end", size, -1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := read(t, e, key, tc.offset, tc.length)
			if !bytes.Equal(got, tc.want) {
				t.Fatalf("Open(%d, %d) = %d bytes, want %d bytes (or different content)", tc.offset, tc.length, len(got), len(tc.want))
			}
		})
	}
	for _, tc := range []struct {
		name           string
		offset, length int64
	}{
		{"offset past end", size + 1, -1},
		{"negative offset", -1, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, err := e.s.Open(e.ctx, key, tc.offset, tc.length)
			if err == nil {
				_ = rc.Close()
			}
			wantErrIs(t, fmt.Sprintf("Open(%d, %d)", tc.offset, tc.length), err, core.ErrInvalidArgument)
		})
	}
}

func testSHAMismatch(t *testing.T, e *env) {
	data := content(3, 50_000)
	want := infoOf(content(4, 50_000)) // right size, wrong sha256
	key := e.key("sha-mismatch")
	err := e.s.Put(e.ctx, key, bytes.NewReader(data), want)
	if err == nil {
		t.Fatal("Put with a wrong sha256 succeeded")
	}
	if !strings.Contains(err.Error(), "sha256") {
		t.Errorf("Put error %q does not say the sha256 differs", err)
	}
	wantAbsent(t, e, key)
}

func testSizeMismatch(t *testing.T, e *env) {
	data := content(5, 50_000)
	for _, tc := range []struct {
		name string
		want ports.ObjectInfo
	}{
		// The reader is shorter than promised (sha256 of the promised bytes).
		{"short", infoOf(append(slices.Clone(data), 'x'))},
		// The reader is longer than promised.
		{"long", infoOf(data[:len(data)-1])},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := e.key("size-mismatch-" + tc.name)
			err := e.s.Put(e.ctx, key, bytes.NewReader(data), tc.want)
			if err == nil {
				t.Fatal("Put with a wrong size succeeded")
			}
			if !strings.Contains(err.Error(), "size") && !strings.Contains(err.Error(), "bytes") {
				t.Errorf("Put error %q does not say the size differs", err)
			}
			wantAbsent(t, e, key)
		})
	}
}

// endlessReader yields pseudo-random bytes as if it never ended, and counts
// them. So that a store that does not stop reading fails the test instead
// of hanging it, it gives up with errReadTooFar after limit bytes (well past
// any size the suite declares), or after a million reads asking for no
// bytes (a copy loop that never ends).
type endlessReader struct {
	r     mrand.ChaCha8
	n     int64
	limit int64
	empty int
}

var errReadTooFar = errors.New("the store kept reading far past the declared size")

func (r *endlessReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		r.empty++
	}
	if r.n >= r.limit || r.empty > 1<<20 {
		return 0, errReadTooFar
	}
	p = p[:min(int64(len(p)), r.limit-r.n)]
	n, _ := r.r.Read(p)
	r.n += int64(n)
	return n, nil
}

// testOversizedReader: a reader longer than the declared size (here one
// that never ends) fails the Put as a mismatch once it yields more than
// want.Size bytes, without being read any further, and publishes nothing,
// also over an existing object. The declared sizes fit in one upload part
// and need several.
func testOversizedReader(t *testing.T, e *env) {
	for _, tc := range []struct {
		name string
		size int64
	}{
		{"one part", 64 << 10},
		{"several parts", 17 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := e.key("oversized-" + strings.ReplaceAll(tc.name, " ", "-"))
			want := infoOf(content(12, int(tc.size)))
			src := &endlessReader{r: *mrand.NewChaCha8([32]byte{12}), limit: tc.size + 64<<20}
			err := e.s.Put(e.ctx, key, src, want)
			if err == nil {
				t.Fatal("Put of an endless reader succeeded")
			}
			if errors.Is(err, errReadTooFar) {
				t.Fatalf("Put read %d bytes of a reader declared to hold %d and did not stop: %v", src.n, tc.size, err)
			}
			if !errors.Is(err, core.ErrInvalidArgument) {
				t.Errorf("Put error = %v, want one wrapping core.ErrInvalidArgument (the reader and its size disagree)", err)
			}
			if src.n > tc.size+1 {
				t.Errorf("Put read %d bytes of a reader declared to hold %d; it must stop one byte past the declared size", src.n, tc.size)
			}
			wantAbsent(t, e, key)

			old := content(13, 1000)
			mustPut(t, e, key, old)
			src = &endlessReader{r: *mrand.NewChaCha8([32]byte{13}), limit: tc.size + 64<<20}
			if err := e.s.Put(e.ctx, key, src, want); err == nil {
				t.Fatal("Put of an endless reader over an existing object succeeded")
			}
			wantContent(t, e, key, old)
		})
	}
}

func testFailedPutKeepsExisting(t *testing.T, e *env) {
	old := content(6, 30_000)
	key := e.key("kept")
	mustPut(t, e, key, old)
	bad := content(7, 30_000)
	if err := e.s.Put(e.ctx, key, bytes.NewReader(bad), infoOf(old)); err == nil {
		t.Fatal("Put with a wrong sha256 over an existing object succeeded")
	}
	if err := e.s.Put(e.ctx, key, bytes.NewReader(bad[:100]), infoOf(bad)); err == nil {
		t.Fatal("Put with a short reader over an existing object succeeded")
	}
	wantContent(t, e, key, old)
}

func testReaderError(t *testing.T, e *env) {
	data := content(8, 256<<10)
	boom := errors.New("disk on fire")
	key := e.key("reader-error")
	err := e.s.Put(e.ctx, key, &failingReader{data: data[:len(data)/2], err: boom}, infoOf(data))
	if !errors.Is(err, boom) {
		t.Fatalf("Put error = %v, want one wrapping the reader's error", err)
	}
	wantAbsent(t, e, key)
}

// cancelReader cancels a context once half the data has been read, and
// counts the reads after that.
type cancelReader struct {
	r      io.Reader
	n, at  int
	cancel context.CancelFunc
	after  int
}

func (c *cancelReader) Read(p []byte) (int, error) {
	if c.n >= c.at {
		c.cancel()
		c.after++
	}
	if len(p) > 4096 {
		p = p[:4096]
	}
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func testCancelledPut(t *testing.T, e *env) {
	data := content(9, 256<<10)
	key := e.key("cancelled")
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	r := &cancelReader{r: bytes.NewReader(data), at: len(data) / 2, cancel: cancel}
	if err := e.s.Put(ctx, key, r, infoOf(data)); err == nil {
		t.Fatal("Put succeeded although its context was cancelled half way")
	}
	// The read that cancelled may be the last one.
	if r.after > 1 {
		t.Errorf("Put read its source %d more times after its context ended", r.after-1)
	}
	wantAbsent(t, e, key)
}

func testOverwrite(t *testing.T, e *env) {
	key := e.key("overwrite")
	v1, v2 := content(10, 20_000), content(11, 30_000)
	mustPut(t, e, key, v1)
	wantContent(t, e, key, v1)
	mustPut(t, e, key, v2)
	wantContent(t, e, key, v2)
}

func testConcurrentSameKey(t *testing.T, e *env) {
	data := content(12, 512<<10)
	key := e.key("same")
	const writers = 4
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() { errs[i] = e.s.Put(e.ctx, key, bytes.NewReader(data), infoOf(data)) })
	}
	wg.Wait()
	t.Cleanup(func() { _ = e.s.Delete(context.Background(), key) })
	for i, err := range errs {
		if err != nil {
			t.Errorf("writer %d: %v", i, err)
		}
	}
	wantContent(t, e, key, data)
}

func testConcurrentKeys(t *testing.T, e *env) {
	const n = 6
	datas := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		datas[i] = content(uint64(100+i), 64<<10+i)
		key := e.key(fmt.Sprintf("many/%d", i))
		t.Cleanup(func() { _ = e.s.Delete(context.Background(), key) })
		wg.Go(func() { errs[i] = e.s.Put(e.ctx, key, bytes.NewReader(datas[i]), infoOf(datas[i])) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Put %d: %v", i, errs[i])
		}
		wantContent(t, e, e.key(fmt.Sprintf("many/%d", i)), datas[i])
	}
}

func testDelete(t *testing.T, e *env) {
	key := e.key("deleted")
	mustPut(t, e, key, content(13, 1000))
	for i := range 2 {
		if err := e.s.Delete(e.ctx, key); err != nil {
			t.Fatalf("Delete #%d: %v", i+1, err)
		}
		wantAbsent(t, e, key)
	}
	if err := e.s.Delete(e.ctx, e.key("never/existed")); err != nil {
		t.Fatalf("Delete of a key never written: %v", err)
	}
}

func testList(t *testing.T, e *env) {
	objs := map[string][]byte{
		e.key("in/a"):      content(40, 100),
		e.key("in/b/c"):    content(41, 2000),
		e.key("in/b/d/e"):  content(42, 0),
		e.key("inside"):    content(43, 10), // shares the characters, not the prefix
		e.key("out/in/f"):  content(44, 10),
		e.key("deleted/x"): content(45, 10),
	}
	for k, b := range objs {
		mustPut(t, e, k, b)
		t.Cleanup(func() { _ = e.s.Delete(context.Background(), k) })
	}
	if err := e.s.Delete(e.ctx, e.key("deleted/x")); err != nil {
		t.Fatal(err)
	}
	list := func(prefix string) map[string]ports.ObjectInfo {
		t.Helper()
		got := map[string]ports.ObjectInfo{}
		err := e.s.List(e.ctx, prefix, func(key string, info ports.ObjectInfo) error {
			if _, dup := got[key]; dup {
				t.Errorf("List(%q) listed %s twice", prefix, key)
			}
			got[key] = info
			return nil
		})
		if err != nil {
			t.Fatalf("List(%q): %v", prefix, err)
		}
		return got
	}
	got := list(e.key("in/"))
	if len(got) != 3 {
		t.Errorf("List(in/) = %v, want the 3 objects under in/", slices.Sorted(maps.Keys(got)))
	}
	for _, k := range []string{"in/a", "in/b/c", "in/b/d/e"} {
		info, ok := got[e.key(k)]
		switch {
		case !ok:
			t.Errorf("List(in/) misses %s", k)
		case info.Size != int64(len(objs[e.key(k)])):
			t.Errorf("List(in/) says %s has %d bytes, want %d", k, info.Size, len(objs[e.key(k)]))
		case info.ModTime.IsZero():
			t.Errorf("List(in/) gives %s no modification time", k)
		}
	}
	if got := list(e.key("deleted/")); len(got) != 0 {
		t.Errorf("List of a prefix whose only object was deleted = %v, want nothing", got)
	}
	if got := list(e.key("never/")); len(got) != 0 {
		t.Errorf("List of a prefix never written = %v, want nothing", got)
	}
	if got := list(e.key("inside/")); len(got) != 0 {
		t.Errorf("List below an object = %v, want nothing", got)
	}
	all := list("")
	for k := range objs {
		if _, ok := all[k]; ok != (k != e.key("deleted/x")) {
			t.Errorf("List(\"\") lists %s: %v", k, ok)
		}
	}
	stop := errors.New("stop")
	n := 0
	err := e.s.List(e.ctx, e.key("in/"), func(string, ports.ObjectInfo) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Errorf("List with a failing callback: %v after %d calls, want its error after 1", err, n)
	}
	for _, p := range []string{e.key("in"), "/", e.key("in//"), e.key("../in/")} {
		err := e.s.List(e.ctx, p, func(string, ports.ObjectInfo) error { return nil })
		wantErrIs(t, fmt.Sprintf("List(%q)", p), err, core.ErrInvalidArgument)
	}
}

func testNotFound(t *testing.T, e *env) {
	key := e.key("missing/object")
	_, err := e.s.Stat(e.ctx, key)
	wantErrIs(t, "Stat", err, core.ErrNotFound)
	if !strings.Contains(err.Error(), key) {
		t.Errorf("Stat error %q does not name the key %q", err, key)
	}
	_, err = e.s.Open(e.ctx, key, 0, -1)
	wantErrIs(t, "Open", err, core.ErrNotFound)
	_, err = e.s.Open(e.ctx, key, 10, 5)
	wantErrIs(t, "ranged Open", err, core.ErrNotFound)
	// A key below an existing object does not exist either.
	parent := e.key("parent")
	mustPut(t, e, parent, content(14, 10))
	_, err = e.s.Stat(e.ctx, parent+"/child")
	wantErrIs(t, "Stat below an object", err, core.ErrNotFound)
	if err := e.s.Delete(e.ctx, parent+"/child"); err != nil {
		t.Fatalf("Delete below an object: %v", err)
	}
	wantContent(t, e, parent, content(14, 10))
}

func testInvalidKeys(t *testing.T, e *env) {
	data := content(15, 10)
	for _, key := range []string{
		"",
		"/abs",
		"trailing/",
		"a//b",
		"..",
		".",
		"../escape",
		"a/../../escape",
		"a/./b",
		`back\slash`,
		"nul\x00byte",
		"new\nline",
		"bad-utf8-\xff",
		strings.Repeat("k", 1025),
		strings.Repeat("c", 256) + "/x",
	} {
		t.Run(fmt.Sprintf("%.20q", key), func(t *testing.T) {
			wantErrIs(t, "Put", e.s.Put(e.ctx, key, bytes.NewReader(data), infoOf(data)), core.ErrInvalidArgument)
			_, err := e.s.Stat(e.ctx, key)
			wantErrIs(t, "Stat", err, core.ErrInvalidArgument)
			_, err = e.s.Open(e.ctx, key, 0, -1)
			wantErrIs(t, "Open", err, core.ErrInvalidArgument)
			wantErrIs(t, "Delete", e.s.Delete(e.ctx, key), core.ErrInvalidArgument)
			_, err = e.s.SignedURL(e.ctx, key, time.Minute)
			wantErrIs(t, "SignedURL", err, core.ErrInvalidArgument)
		})
	}
}

func testInvalidWant(t *testing.T, e *env) {
	data := content(16, 100)
	good := infoOf(data)
	for _, tc := range []struct {
		name string
		want ports.ObjectInfo
	}{
		{"negative size", ports.ObjectInfo{Size: -1, SHA256: good.SHA256}},
		{"empty sha256", ports.ObjectInfo{Size: good.Size}},
		{"uppercase sha256", ports.ObjectInfo{Size: good.Size, SHA256: strings.ToUpper(good.SHA256)}},
		{"prefixed sha256", ports.ObjectInfo{Size: good.Size, SHA256: "sha256:" + good.SHA256}},
		{"short sha256", ports.ObjectInfo{Size: good.Size, SHA256: good.SHA256[:63]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := e.key("bad-want-" + strings.ReplaceAll(tc.name, " ", "-"))
			wantErrIs(t, "Put", e.s.Put(e.ctx, key, bytes.NewReader(data), tc.want), core.ErrInvalidArgument)
			wantAbsent(t, e, key)
		})
	}
}

func testEmptyObject(t *testing.T, e *env) {
	key := e.key("empty")
	mustPut(t, e, key, nil)
	wantContent(t, e, key, nil)
	if got := read(t, e, key, 0, 0); len(got) != 0 {
		t.Fatalf("Open(0, 0) of the empty object = %d bytes", len(got))
	}
}

func testLargeObject(t *testing.T, e *env) {
	data := content(17, LargeObjectSize)
	key := e.key("large.ext4")
	mustPut(t, e, key, data)
	wantContent(t, e, key, data)
	// A range across the first 16 MiB part boundary.
	const at = 16<<20 - 10
	if got := read(t, e, key, at, 20); !bytes.Equal(got, data[at:at+20]) {
		t.Fatalf("range across the part boundary differs")
	}
}

func testSignedURL(t *testing.T, e *env) {
	data := content(18, 5000)
	key := e.key("signed/object")
	mustPut(t, e, key, data)
	u, err := e.s.SignedURL(e.ctx, key, 5*time.Minute)
	if !e.h.SupportsSignedURL() {
		wantErrIs(t, "SignedURL", err, core.ErrUnsupported)
		return
	}
	if err != nil {
		t.Fatalf("SignedURL: %v", err)
	}
	client := http.DefaultClient
	if c, ok := e.h.(SignedURLClient); ok {
		client = c.SignedURLClient()
	}
	status, body, _ := get(t, e.ctx, client, u, "")
	if status != http.StatusOK || !bytes.Equal(body, data) {
		t.Fatalf("GET signed URL: status %d, %d bytes; want 200 and %d bytes", status, len(body), len(data))
	}
	status, body, header := get(t, e.ctx, client, u, "bytes=100-199")
	if status != http.StatusPartialContent || !bytes.Equal(body, data[100:200]) {
		t.Fatalf("Range GET signed URL: status %d, %d bytes; want 206 and bytes 100-199", status, len(body))
	}
	if cr := header.Get("Content-Range"); cr != fmt.Sprintf("bytes 100-199/%d", len(data)) {
		t.Errorf("Content-Range = %q", cr)
	}
	for _, ttl := range []time.Duration{0, -time.Second, 8 * 24 * time.Hour} {
		_, err := e.s.SignedURL(e.ctx, key, ttl)
		wantErrIs(t, fmt.Sprintf("SignedURL(ttl=%v)", ttl), err, core.ErrInvalidArgument)
	}
}

func get(t *testing.T, ctx context.Context, client *http.Client, u, rangeHeader string) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Fatalf("signed URL does not parse: %v", err)
	}
	if rangeHeader != "" {
		req.Header.Set("Range", rangeHeader)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET signed URL: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading signed URL response: %v", err)
	}
	return resp.StatusCode, body, resp.Header
}

// schemeName is the shape of a URL scheme (RFC 3986), lowercase.
var schemeName = regexp.MustCompile(`^[a-z][a-z0-9+.-]*$`)

func testBackend(t *testing.T, e *env) {
	b := e.s.Backend()
	if !schemeName.MatchString(b) {
		t.Fatalf("Backend() = %q, want a lowercase URL scheme such as file or s3", b)
	}
	if n, ok := e.h.(BackendNamer); ok && b != n.Backend() {
		t.Fatalf("Backend() = %q, want %q", b, n.Backend())
	}
}
