package layercache

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
)

// helperEnv makes the test binary act as a second process writing to a
// shared cache (see TestMain).
const helperEnv = "LAYERCACHE_TEST_HELPER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(helperProcess(spec))
	}
	os.Exit(m.Run())
}

// helperProcess writes blob dir|hexdata|start-file through Begin and prints
// "wrote" or "reused". It waits for the start file so that all writers race.
func helperProcess(spec string) int {
	parts := strings.SplitN(spec, "|", 3)
	dir, dataPath, start := parts[0], parts[1], parts[2]
	data, err := os.ReadFile(dataPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for {
		if _, err := os.Stat(start); err == nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	c, err := Open(dir, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	wrote, err := slowWrite(c, data)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if wrote {
		fmt.Println("wrote")
	} else {
		fmt.Println("reused")
	}
	return 0
}

// slowWrite writes data through Begin in small chunks, so that concurrent
// writers overlap, and reports whether this caller was the one that wrote.
func slowWrite(c *Cache, data []byte) (bool, error) {
	d := digest.FromBytes(data)
	w, p, err := c.Begin(context.Background(), d, int64(len(data)))
	if err != nil {
		return false, err
	}
	if w == nil {
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, data) {
			return false, fmt.Errorf("reused blob is not intact: %v", err)
		}
		return false, nil
	}
	defer w.Close()
	for off := 0; off < len(data); off += 4096 {
		end := min(off+4096, len(data))
		if _, err := w.Write(data[off:end]); err != nil {
			return false, err
		}
		time.Sleep(200 * time.Microsecond)
	}
	_, err = w.Commit()
	return true, err
}

func randomBytes(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func openCache(t testing.TB, max int64) *Cache {
	t.Helper()
	c, err := Open(t.TempDir(), max)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestPutGet(t *testing.T) {
	c := openCache(t, 0)
	data := randomBytes(t, 100_000)
	d := digest.FromBytes(data)

	if _, ok, err := c.Get(d); err != nil || ok {
		t.Fatalf("Get before Put = ok %v, err %v; want miss", ok, err)
	}
	p, err := c.Put(d, int64(len(data)), bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("blob at %s differs from what was put (err %v)", p, err)
	}
	p2, ok, err := c.Get(d)
	if err != nil || !ok || p2 != p {
		t.Fatalf("Get = %q %v %v, want %q true nil", p2, ok, err, p)
	}
	// A second Put of a cached blob does not read its reader.
	if _, err := c.Put(d, int64(len(data)), iotestErrReader{}); err != nil {
		t.Fatalf("Put of a cached blob read its reader: %v", err)
	}
	if n, _ := c.Usage(); n != int64(len(data)) {
		t.Fatalf("Usage = %d, want %d", n, len(data))
	}
}

type iotestErrReader struct{}

func (iotestErrReader) Read([]byte) (int, error) { return 0, errors.New("must not be read") }

func TestPutRejectsBadContent(t *testing.T) {
	data := []byte("layer bytes")
	good := digest.FromBytes(data)
	tests := []struct {
		name    string
		d       digest.Digest
		size    int64
		content []byte
		want    error
	}{
		{"wrong digest", digest.FromString("other"), int64(len(data)), data, ErrDigestMismatch},
		{"too long", good, int64(len(data)) - 1, data, ErrSizeMismatch},
		{"too short", good, int64(len(data)) + 1, data, ErrSizeMismatch},
		{"path traversal digest", digest.Digest("sha256:../../etc/passwd"), 1, data, ErrInvalidDigest},
		{"unknown algorithm", digest.Digest("md5:d41d8cd98f00b204e9800998ecf8427e"), 1, data, ErrInvalidDigest},
		{"short sha256", digest.Digest("sha256:abcd"), 1, data, ErrInvalidDigest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := openCache(t, 0)
			_, err := c.Put(tt.d, tt.size, bytes.NewReader(tt.content))
			if !errors.Is(err, tt.want) {
				t.Fatalf("Put error = %v, want %v", err, tt.want)
			}
			if n, _ := c.Usage(); n != 0 {
				t.Fatalf("a rejected blob was cached (%d bytes)", n)
			}
			if tt.want == ErrDigestMismatch || strings.HasPrefix(tt.name, "too long") {
				if _, err := os.Stat(c.partialPath(tt.d)); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("bad partial file left behind: %v", err)
				}
			}
		})
	}
}

// corrupt flips one byte of a cached blob in place.
func corrupt(t *testing.T, p string, keepMTime bool) {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, 10); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, 10); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if keepMTime {
		if err := os.Chtimes(p, st.ModTime(), st.ModTime()); err != nil {
			t.Fatal(err)
		}
	} else {
		// Make sure the mtime moves even on coarse-grained clocks.
		later := st.ModTime().Add(time.Second)
		if err := os.Chtimes(p, later, later); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCorruptEntryIsDetectedAndRefetched(t *testing.T) {
	c := openCache(t, 0)
	data := randomBytes(t, 50_000)
	d := digest.FromBytes(data)
	p, err := c.Put(d, int64(len(data)), bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	corrupt(t, p, false)

	if _, ok, err := c.Get(d); err != nil || ok {
		t.Fatalf("Get of a corrupted entry = ok %v, err %v; want a miss", ok, err)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("corrupt blob was not removed: %v", err)
	}
	// Fetching again repairs the entry.
	if _, err := c.Put(d, int64(len(data)), bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	p, ok, err := c.Get(d)
	if err != nil || !ok {
		t.Fatalf("Get after refetch = %v %v", ok, err)
	}
	if got, _ := os.ReadFile(p); !bytes.Equal(got, data) {
		t.Fatal("refetched blob differs")
	}
}

// Corruption that keeps size, mtime and inode slips past the cheap check
// in Get (by design); Verify re-hashes and catches it.
func TestVerifyCatchesCorruptionWithSameMetadata(t *testing.T) {
	c := openCache(t, 0)
	data := randomBytes(t, 50_000)
	d := digest.FromBytes(data)
	p, err := c.Put(d, int64(len(data)), bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	corrupt(t, p, true)
	if _, ok, _ := c.Get(d); !ok {
		t.Log("Get noticed the corruption too (mtime granularity); fine")
	}
	if err := c.Verify(d); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("Verify = %v, want ErrDigestMismatch", err)
	}
	if _, ok, _ := c.Get(d); ok {
		t.Fatal("entry still served after Verify found it corrupt")
	}
}

func TestMissingSidecarIsRebuilt(t *testing.T) {
	c := openCache(t, 0)
	data := randomBytes(t, 10_000)
	d := digest.FromBytes(data)
	if _, err := c.Put(d, int64(len(data)), bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if err := c.SetLabel(d, "k", "v"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(c.metaPath(d)); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := c.Get(d); err != nil || !ok {
		t.Fatalf("Get without sidecar = %v %v, want a verified hit", ok, err)
	}
	if _, err := os.Stat(c.metaPath(d)); err != nil {
		t.Fatalf("sidecar not rebuilt: %v", err)
	}
}

func TestLabels(t *testing.T) {
	c := openCache(t, 0)
	data := []byte("x")
	d := digest.FromBytes(data)
	if err := c.SetLabel(d, "diffid", "sha256:x"); err == nil {
		t.Fatal("SetLabel on a blob that is not cached succeeded")
	}
	if _, err := c.Put(d, 1, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if err := c.SetLabel(d, "diffid", "sha256:abc"); err != nil {
		t.Fatal(err)
	}
	l, err := c.Labels(d)
	if err != nil || l["diffid"] != "sha256:abc" {
		t.Fatalf("Labels = %v, %v", l, err)
	}
}

func TestResumePartial(t *testing.T) {
	c := openCache(t, 0)
	data := randomBytes(t, 64_000)
	d := digest.FromBytes(data)
	ctx := context.Background()

	w, _, err := c.Begin(ctx, d, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data[:20_000]); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(); !errors.Is(err, ErrSizeMismatch) {
		t.Fatalf("Commit of a short blob = %v, want ErrSizeMismatch", err)
	}

	w, _, err = c.Begin(ctx, d, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if w.Offset() != 20_000 {
		t.Fatalf("resumed at %d, want 20000", w.Offset())
	}
	prefix := make([]byte, 100)
	if _, err := w.ReadAt(prefix, 50); err != nil || !bytes.Equal(prefix, data[50:150]) {
		t.Fatalf("ReadAt of the prefix = %v", err)
	}
	if _, err := w.Write(data[20_000:]); err != nil {
		t.Fatal(err)
	}
	p, err := w.Commit()
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p); !bytes.Equal(got, data) {
		t.Fatal("resumed blob differs")
	}
	if _, err := os.Stat(c.partialPath(d)); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("partial file left after commit")
	}
}

func TestResumeWithBadPrefixFailsAndStartsOver(t *testing.T) {
	c := openCache(t, 0)
	data := randomBytes(t, 30_000)
	d := digest.FromBytes(data)
	ctx := context.Background()
	// A crash left garbage in the partial file.
	if err := os.WriteFile(c.partialPath(d), bytes.Repeat([]byte{0}, 10_000), 0o644); err != nil {
		t.Fatal(err)
	}
	w, _, err := c.Begin(ctx, d, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if w.Offset() != 10_000 {
		t.Fatalf("offset %d, want 10000", w.Offset())
	}
	if _, err := w.Write(data[10_000:]); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("Commit = %v, want ErrDigestMismatch", err)
	}
	w, _, err = c.Begin(ctx, d, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.Offset() != 0 {
		t.Fatalf("after a mismatch the next attempt starts at %d, want 0", w.Offset())
	}
}

// SkipHash hands the digest check to the caller's reader, and only for a
// file with no byte in it yet; the size is still checked, and Reset turns
// the writer's own hash back on.
func TestSkipHash(t *testing.T) {
	data := randomBytes(t, 30_000)
	d := digest.FromBytes(data)
	ctx := context.Background()
	cases := []struct {
		name     string
		prefix   int  // bytes a previous attempt left in the partial file
		before   int  // bytes written before SkipHash
		reset    bool // Reset after SkipHash
		write    []byte
		wantSkip bool
		wantErr  error
	}{
		{name: "fresh file, bytes the caller checked", write: data, wantSkip: true},
		{name: "fresh file, short", write: data[:10_000], wantSkip: true, wantErr: ErrSizeMismatch},
		{name: "resumed prefix keeps the hash", prefix: 10_000, write: append([]byte{1}, data[10_001:]...), wantErr: ErrDigestMismatch},
		{name: "after a write keeps the hash", before: 100, write: append([]byte{1}, data[101:]...), wantErr: ErrDigestMismatch},
		{name: "reset hashes again", reset: true, write: append([]byte{1}, data[1:]...), wantSkip: true, wantErr: ErrDigestMismatch},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := openCache(t, 0)
			if tc.prefix > 0 {
				if err := os.WriteFile(c.partialPath(d), data[:tc.prefix], 0o644); err != nil {
					t.Fatal(err)
				}
			}
			w, _, err := c.Begin(ctx, d, int64(len(data)))
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if _, err := w.Write(data[:tc.before]); err != nil {
				t.Fatal(err)
			}
			if got := w.SkipHash(); got != tc.wantSkip {
				t.Fatalf("SkipHash = %v, want %v", got, tc.wantSkip)
			}
			if tc.reset {
				if err := w.Reset(); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := w.Write(tc.write); err != nil {
				t.Fatal(err)
			}
			p, err := w.Commit()
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Commit = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(p); !bytes.Equal(got, data) {
				t.Fatal("committed blob differs")
			}
		})
	}
}

func TestBeginHonoursContextWhileAnotherWriterHoldsTheLock(t *testing.T) {
	c := openCache(t, 0)
	d := digest.FromString("blob")
	w, _, err := c.Begin(context.Background(), d, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := c.Begin(ctx, d, 4); !errors.Is(err, context.Canceled) {
		t.Fatalf("second Begin = %v, want context.Canceled", err)
	}
}

func TestConcurrentWritersInOneProcess(t *testing.T) {
	c := openCache(t, 0)
	data := randomBytes(t, 256*1024)
	var wrote atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := slowWrite(c, data)
			if err != nil {
				errs <- err
			}
			if w {
				wrote.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if wrote.Load() != 1 {
		t.Fatalf("%d goroutines wrote the blob, want exactly 1", wrote.Load())
	}
}

func TestConcurrentWritersAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	data := randomBytes(t, 512*1024)
	dataPath := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(dataPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	start := filepath.Join(t.TempDir(), "start")
	spec := dir + "|" + dataPath + "|" + start

	const procs = 3
	outs := make([]*bytes.Buffer, procs)
	cmds := make([]*exec.Cmd, procs)
	for i := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"="+spec)
		outs[i] = &bytes.Buffer{}
		cmd.Stdout = outs[i]
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	// This process joins the race with two goroutines.
	c, err := Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(start, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var local atomic.Int32
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := slowWrite(c, data)
			if err != nil {
				t.Error(err)
			}
			if w {
				local.Add(1)
			}
		}()
	}
	wg.Wait()
	writers := int(local.Load())
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("helper %d: %v", i, err)
		}
		if strings.TrimSpace(outs[i].String()) == "wrote" {
			writers++
		}
	}
	if writers != 1 {
		t.Fatalf("%d writers wrote the blob, want exactly 1", writers)
	}
	p, ok, err := c.Get(digest.FromBytes(data))
	if err != nil || !ok {
		t.Fatalf("Get = %v %v", ok, err)
	}
	if got, _ := os.ReadFile(p); !bytes.Equal(got, data) {
		t.Fatal("blob is not intact")
	}
}

// setAccess backdates an entry's last access, so LRU order does not depend
// on the clock between Puts.
func setAccess(t *testing.T, c *Cache, d digest.Digest, at time.Time) {
	t.Helper()
	if err := os.Chtimes(c.metaPath(d), at, at); err != nil {
		t.Fatal(err)
	}
}

func TestEvictionLRUSkipsPinned(t *testing.T) {
	c := openCache(t, 0) // no cap while filling
	base := time.Now().Add(-time.Hour)
	var ds []digest.Digest
	for i := range 4 {
		data := randomBytes(t, 1000)
		d := digest.FromBytes(data)
		if _, err := c.Put(d, 1000, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		setAccess(t, c, d, base.Add(time.Duration(i)*time.Minute))
		ds = append(ds, d)
	}
	// ds[0] is the oldest but pinned by a running build.
	lease, err := c.Acquire(context.Background(), ds[0])
	if err != nil {
		t.Fatal(err)
	}
	// A Get refreshes ds[1], making ds[2] the oldest unpinned entry.
	if _, ok, _ := c.Get(ds[1]); !ok {
		t.Fatal("miss")
	}
	c.maxBytes = 2500
	freed, err := c.Evict()
	if err != nil {
		t.Fatal(err)
	}
	if freed != 2000 {
		t.Fatalf("freed %d bytes, want 2000", freed)
	}
	present := func(d digest.Digest) bool {
		_, err := os.Stat(c.blobPath(d))
		return err == nil
	}
	if !present(ds[0]) {
		t.Fatal("a pinned blob was evicted")
	}
	if !present(ds[1]) {
		t.Fatal("the most recently used blob was evicted")
	}
	if present(ds[2]) || present(ds[3]) {
		t.Fatal("least recently used unpinned blobs survived")
	}
	lease.Release()
	lease.Release() // idempotent
	// Once unpinned, the old blob goes as soon as the cache is over the cap.
	c.maxBytes = 1000
	if _, err := c.Evict(); err != nil {
		t.Fatal(err)
	}
	if present(ds[0]) {
		t.Fatal("released blob kept although the cache is over its cap")
	}
	if n, _ := c.Usage(); n > 1000 {
		t.Fatalf("usage %d exceeds cap", n)
	}
}

func TestEvictionOnCommitUnderSmallCap(t *testing.T) {
	c := openCache(t, 2048)
	var last string
	for range 5 {
		data := randomBytes(t, 1000)
		p, err := c.Put(digest.FromBytes(data), 1000, bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		last = p
	}
	if n, _ := c.Usage(); n > 2048 {
		t.Fatalf("usage %d exceeds the 2048-byte cap", n)
	}
	if _, err := os.Stat(last); err != nil {
		t.Fatalf("the newest blob was evicted: %v", err)
	}
}

func TestOpenSweepsStalePartials(t *testing.T) {
	dir := t.TempDir()
	c, err := Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	oldD, newD := digest.FromString("old"), digest.FromString("new")
	for _, d := range []digest.Digest{oldD, newD} {
		if err := os.WriteFile(c.partialPath(d), []byte("part"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-48 * time.Hour)
	if err := os.Chtimes(c.partialPath(oldD), old, old); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.partialPath(oldD)); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("stale partial survived Open")
	}
	if _, err := os.Stat(c.partialPath(newD)); err != nil {
		t.Fatal("recent partial (resumable) was removed")
	}
}

// A cache that stays open (a server) drops partials that went stale
// after it opened, when SweepTemp runs.
func TestSweepTempDropsPartialsThatWentStaleWhileOpen(t *testing.T) {
	c, err := Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	d := digest.FromString("abandoned")
	if err := os.WriteFile(c.partialPath(d), []byte("part"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.SweepTemp()
	if _, err := os.Stat(c.partialPath(d)); err != nil {
		t.Fatal("a fresh partial (resumable) was removed")
	}
	old := time.Now().Add(-25 * time.Hour)
	if err := os.Chtimes(c.partialPath(d), old, old); err != nil {
		t.Fatal(err)
	}
	c.SweepTemp()
	if _, err := os.Stat(c.partialPath(d)); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a stale partial survived SweepTemp")
	}
}

func BenchmarkGetHit(b *testing.B) {
	c := openCache(b, 0)
	data := randomBytes(b, 64<<20)
	d := digest.FromBytes(data)
	if _, err := c.Put(d, int64(len(data)), bytes.NewReader(data)); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, ok, err := c.Get(d); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

func BenchmarkPut64MiB(b *testing.B) {
	data := randomBytes(b, 64<<20)
	d := digest.FromBytes(data)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		c := openCache(b, 0)
		if _, err := c.Put(d, int64(len(data)), io.MultiReader(bytes.NewReader(data))); err != nil {
			b.Fatal(err)
		}
	}
}
