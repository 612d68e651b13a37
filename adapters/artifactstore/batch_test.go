package artifactstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// PutUnsynced is held to Put's checks: a wrong size or sha256 publishes
// nothing; a right one reads back after SyncAll.
func TestPutUnsynced(t *testing.T) {
	for _, u := range []string{"file://" + t.TempDir(), "mem://"} {
		t.Run(u[:4], func(t *testing.T) {
			ctx := context.Background()
			s, err := Open(ctx, u)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			data := []byte("chunk bytes")
			sum := sha256.Sum256(data)
			want := ports.ObjectInfo{Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
			bad := want
			bad.SHA256 = want.SHA256[:63] + "0"
			if bad.SHA256 == want.SHA256 {
				bad.SHA256 = want.SHA256[:63] + "1"
			}
			if err := s.PutUnsynced(ctx, "c/bad", data, bad); !errors.Is(err, core.ErrInvalidArgument) {
				t.Fatalf("PutUnsynced with a wrong sha256: %v", err)
			}
			if _, err := s.Stat(ctx, "c/bad"); !errors.Is(err, core.ErrNotFound) {
				t.Fatalf("a refused object is visible: %v", err)
			}
			if err := s.PutUnsynced(ctx, "c/good", data, want); err != nil {
				t.Fatal(err)
			}
			if err := s.SyncAll(ctx); err != nil {
				t.Fatal(err)
			}
			rc, err := s.Open(ctx, "c/good", 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(rc)
			rc.Close()
			if string(got) != string(data) {
				t.Fatalf("read back %q", got)
			}
			if info, err := s.Stat(ctx, "c/good"); err != nil || info.SHA256 != want.SHA256 {
				t.Fatalf("Stat: %+v %v", info, err)
			}
			// The key names the content: an object there with the size is
			// kept, and nothing is written.
			same := []byte("chunk BYTES")
			sum2 := sha256.Sum256(same)
			if err := s.PutUnsynced(ctx, "c/good", same, ports.ObjectInfo{Size: int64(len(same)), SHA256: hex.EncodeToString(sum2[:])}); err != nil {
				t.Fatal(err)
			}
			if info, err := s.Stat(ctx, "c/good"); err != nil || info.SHA256 != want.SHA256 {
				t.Fatalf("the object was rewritten: %+v %v", info, err)
			}
		})
	}
}

// TestPutUnsyncedModesAndPrunedDirectories: objects PutUnsynced writes
// take the store's file mode (0640 in 0750 directories by default, as
// Put's), and a directory it made, pruned since by a Delete that left it
// empty, is made again by the next PutUnsynced into it. Before, chunks
// were 0644 whatever the mode, and the second put failed with "no such
// file or directory".
func TestPutUnsyncedModesAndPrunedDirectories(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, "file://"+dir+"/store?create_dir=true")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	put := func(key, content string) {
		t.Helper()
		sum := sha256.Sum256([]byte(content))
		if err := s.PutUnsynced(ctx, key, []byte(content), ports.ObjectInfo{Size: int64(len(content)), SHA256: hex.EncodeToString(sum[:])}); err != nil {
			t.Fatalf("PutUnsynced %s: %v", key, err)
		}
	}
	put("_chunks/sha256/ab/one", "one")
	for p, want := range map[string]os.FileMode{"_chunks/sha256/ab": 0o750, "_chunks/sha256/ab/one": 0o640} {
		if fi, err := os.Stat(filepath.Join(dir, "store", p)); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want %v", p, fi.Mode().Perm(), err, want)
		}
	}
	if err := s.Delete(ctx, "_chunks/sha256/ab/one"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "store", "_chunks")); !os.IsNotExist(err) {
		t.Fatalf("the emptied directories were not pruned (%v): the test tests nothing", err)
	}
	put("_chunks/sha256/ab/two", "two")
	if err := s.SyncAll(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(ctx, "_chunks/sha256/ab/two"); err != nil {
		t.Fatal(err)
	}
}

// An object PutUnsynced wrote and another caller deleted (pruning its
// directory) before SyncAll leaves nothing to sync: SyncAll succeeds.
func TestSyncAllAfterTheDirectoryWasPruned(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	data := []byte("chunk bytes")
	sum := sha256.Sum256(data)
	if err := s.PutUnsynced(ctx, "c/d/x", data, ports.ObjectInfo{Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "c/d/x"); err != nil {
		t.Fatal(err)
	}
	if err := s.SyncAll(ctx); err != nil {
		t.Fatalf("SyncAll after the only object of its directory was deleted: %v", err)
	}
}
