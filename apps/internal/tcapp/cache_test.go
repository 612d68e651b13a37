package tcapp

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cubesandbox/templatecenter/adapters/layercache"
)

// The serving data plane's cache maintenance drops partial downloads
// abandoned for a day; before, only opening the cache did, so a server
// that ran for weeks kept every download that had failed for good.
func TestCacheMaintenanceDropsAbandonedPartials(t *testing.T) {
	dir := t.TempDir()
	c, err := layercache.Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	d := digest.FromString("failed for good")
	// The cache's layout (adapters/layercache/doc.go): tmp/<alg>-<hex>.partial.
	p := filepath.Join(dir, "tmp", d.Algorithm().String()+"-"+d.Encoded()+".partial")
	if err := os.WriteFile(p, []byte("part"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-25 * time.Hour)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	maintainCacheOnce(t.Context(), c)
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an abandoned partial download survived the maintenance: %v", err)
	}
}
