// Command swap-store runs the same code against whichever metadata store
// and artifact store its configuration names: the DSN picks SQLite, MySQL/
// MariaDB or PostgreSQL, the URL picks a local directory, memory, S3 or GCS.
// Nothing else changes.
//
//	go run ./examples/swap-store                      # SQLite + file:// in a temp dir
//	go run ./examples/swap-store -artifacts mem://
//	go run ./examples/swap-store -dsn 'postgres://cube:cube@127.0.0.1:5432/cube?sslmode=disable'
//	go run ./examples/swap-store -dsn 'mysql://cube:cube@tcp(127.0.0.1:3306)/cube'
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/cubesandbox/templatecenter/adapters/artifactstore"
	"github.com/cubesandbox/templatecenter/adapters/store/entstore"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

func main() {
	// The defaults come from the variables the services read, then from a
	// temp dir, so the example runs with no setup at all.
	dsn := flag.String("dsn", os.Getenv("CUBE_TEMPLATE_CENTER_DB_DSN"), "metadata store DSN (sqlite://, mysql://, postgres://)")
	arts := flag.String("artifacts", os.Getenv("CUBE_TEMPLATE_CENTER_ARTIFACT_STORE_URL"), "artifact store URL (file://, mem://, s3://, gs://)")
	flag.Parse()
	if *dsn == "" || *arts == "" {
		dir, err := os.MkdirTemp("", "swap-store-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
		if *dsn == "" {
			*dsn = "sqlite://" + filepath.Join(dir, "tc.db")
		}
		if *arts == "" {
			*arts = "file://" + filepath.Join(dir, "artifacts") + "?create_dir=true"
		}
	}
	if err := run(context.Background(), os.Stdout, *dsn, *arts); err != nil {
		log.Fatal(err)
	}
}

// demoArtifact is the content the example stores: a stand-in for an ext4
// image, its sha256, artifact id and object key. Real ids derive from the
// spec fingerprint; here the content hash plays that part.
func demoArtifact() (content []byte, sum, id, key string) {
	content = bytes.Repeat([]byte("not really an ext4 image\n"), 4096)
	h := sha256.Sum256(content)
	sum = hex.EncodeToString(h[:])
	id, _ = core.ArtifactIDFor(sum) // cannot fail: sum has 64 characters
	return content, sum, id, core.ArtifactObjectKey(id)
}

func run(ctx context.Context, w io.Writer, dsn, artifactsURL string) error {
	// 1. The metadata store, chosen by the DSN.
	store, err := entstore.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer store.Close()
	applied, err := store.Migrate(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "metadata store: %s (%d migrations applied now)\n", store.Dialect(), len(applied))

	// 2. The artifact store, chosen by the URL.
	arts, err := artifactstore.Open(ctx, artifactsURL)
	if err != nil {
		return err
	}
	defer arts.Close()
	fmt.Fprintf(w, "artifact store: %s\n", arts.Backend())

	// 3. Bytes before metadata: Put publishes the object only if size and
	// sha256 match what we claim, so the row written next never points at
	// partial or wrong bytes. A wrong claim publishes nothing.
	content, sum, id, key := demoArtifact()
	want := ports.ObjectInfo{Size: int64(len(content)), SHA256: sum}
	bad := ports.ObjectInfo{Size: want.Size, SHA256: strings.Repeat("0", 64)}
	err = arts.Put(ctx, key+".bad", bytes.NewReader(content), bad)
	if _, serr := arts.Stat(ctx, key+".bad"); !errors.Is(err, artifactstore.ErrContentMismatch) || !errors.Is(serr, core.ErrNotFound) {
		return fmt.Errorf("put with a wrong sha256: err=%v, stat=%v; want a refusal and nothing stored", err, serr)
	}
	fmt.Fprintf(w, "put with a wrong sha256: refused (content mismatch), nothing stored\n")
	if err := arts.Put(ctx, key, bytes.NewReader(content), want); err != nil {
		return err
	}
	fmt.Fprintf(w, "put %s: %d bytes, sha256 %s…\n", key, want.Size, sum[:16])

	// 4. The artifact row. Running twice against a persistent database
	// finds the row already there: a unique key says so with ErrConflict.
	err = store.Artifacts().Create(ctx, &core.Artifact{
		ArtifactID:     id,
		Fingerprint:    sum,
		SourceImageRef: "example.invalid/swap-store:1",
		Ext4SHA256:     sum,
		Ext4SizeBytes:  want.Size,
		Status:         core.ArtifactReady,
		StorageBackend: arts.Backend(),
		ObjectKey:      key,
	})
	switch {
	case errors.Is(err, core.ErrConflict):
		fmt.Fprintf(w, "artifact row %s: already recorded\n", id)
	case err != nil:
		return err
	default:
		fmt.Fprintf(w, "artifact row %s: recorded\n", id)
	}

	// 5. Read both back, the way a download would: row first, then the
	// bytes it names, checked against the row's sha256.
	row, err := store.Artifacts().Get(ctx, id)
	if err != nil {
		return err
	}
	rc, err := arts.Open(ctx, row.ObjectKey, 0, -1)
	if err != nil {
		return err
	}
	defer rc.Close()
	h := sha256.New()
	n, err := io.Copy(h, rc)
	if err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != row.Ext4SHA256 || n != row.Ext4SizeBytes {
		return fmt.Errorf("read back %d bytes with sha256 %s, the row says %d and %s", n, got, row.Ext4SizeBytes, row.Ext4SHA256)
	}
	fmt.Fprintf(w, "read back: row %s (%s, %s) and %d bytes, sha256 matches\n", row.ArtifactID, row.Status, row.StorageBackend, n)
	return nil
}
