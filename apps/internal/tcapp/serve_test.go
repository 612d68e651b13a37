package tcapp

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/apps/config"
	"github.com/cubesandbox/templatecenter/apps/internal/startup"
	"github.com/cubesandbox/templatecenter/ports"
)

// The local store opens the configured directory itself, whatever URL
// syntax its name holds: objects land where localPath (the BUILT report's
// ext4_path) says they are.
func TestOpenArtifactStoreDirNames(t *testing.T) {
	data := []byte("ext4 bytes")
	sum := sha256.Sum256(data)
	want := ports.ObjectInfo{Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
	for _, name := range []string{"plain", "cube#1", "a%20b", "sp ace", "why?not", "semi;colon"} {
		t.Run(name, func(t *testing.T) {
			cfg := config.DefaultsFor(config.Dirs{State: t.TempDir()})
			cfg.ArtifactStoreDir = filepath.Join(t.TempDir(), name, "artifacts")
			s, err := OpenArtifactStore(t.Context(), cfg)
			if err != nil {
				t.Fatalf("OpenArtifactStore(%q): %v", cfg.ArtifactStoreDir, err)
			}
			defer s.Close()
			if err := s.Put(t.Context(), "rfs-1/rfs-1.ext4", bytes.NewReader(data), want); err != nil {
				t.Fatal(err)
			}
			p := localPath(cfg)("rfs-1/rfs-1.ext4")
			if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("the object is not at %s: %q, %v", p, got, err)
			}
		})
	}
}

// TestStoreKindNamesTheOpenedStore: the kind the master is told about
// (startup.StoreKind) is the kind of store the data plane opens from the
// same settings.
func TestStoreKindNamesTheOpenedStore(t *testing.T) {
	for name, edit := range map[string]func(*config.Config){
		"directory": func(*config.Config) {},
		"URL":       func(c *config.Config) { c.ArtifactStoreURL = "mem://?prefix=p" },
		"S3 settings": func(c *config.Config) {
			c.S3 = config.S3{Endpoint: "127.0.0.1:1", Bucket: "b", AccessKey: "a", SecretKey: "s"}
		},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := config.DefaultsFor(config.Dirs{State: t.TempDir()})
			edit(&cfg)
			s, err := OpenArtifactStore(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got, want := s.Backend(), startup.StoreKind(cfg); got != want {
				t.Fatalf("opened a %s store, StoreKind says %s", got, want)
			}
		})
	}
}

// TestCheckRefusesTheMastersDatabaseOnly: a data plane given only
// CUBE_MASTER_DB_DSN (which it does not read) would build into its own
// SQLite file; it refuses, naming the variable it lacks.
func TestCheckRefusesTheMastersDatabaseOnly(t *testing.T) {
	env := map[string]string{"CUBE_MASTER_DB_DSN": "mysql://u:p@tcp(db:3306)/cube", "CUBE_TEMPLATE_CALLBACK_TOKEN": "0123456789abcdef0123"}
	cfg, err := config.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(cfg); err == nil || !strings.Contains(err.Error(), "CUBE_TEMPLATE_CENTER_DB_DSN is not set for templatecenter") {
		t.Fatalf("Check: %v, want a refusal naming CUBE_TEMPLATE_CENTER_DB_DSN", err)
	}
	env["CUBE_TEMPLATE_CENTER_DB_DSN"] = env["CUBE_MASTER_DB_DSN"]
	if cfg, _ = config.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); Check(cfg) != nil {
		t.Fatalf("Check with both: %v", Check(cfg))
	}
}

// TestArtifactFileModeSetting: CUBE_TEMPLATE_CENTER_ARTIFACT_FILE_MODE
// gives the objects of the local store their mode, whether the store is
// the configured directory or a file:// URL; a URL's own file_mode wins.
func TestArtifactFileModeSetting(t *testing.T) {
	data := []byte("ext4 bytes")
	sum := sha256.Sum256(data)
	info := ports.ObjectInfo{Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
	for _, tc := range []struct {
		name, url string // url: "" is the directory setting; DIR is replaced
		want      os.FileMode
	}{
		{"directory", "", 0o600},
		{"file URL", "file://DIR?create_dir=1", 0o600},
		{"file URL with a prefix", "file://DIR?prefix=p&create_dir=1", 0o600},
		{"file URL naming file_mode= in its path", "file://DIR/file_mode=x?create_dir=1", 0o600},
		{"file URL with its own mode", "file://DIR?create_dir=1&file_mode=0644", 0o644},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.DefaultsFor(config.Dirs{State: t.TempDir()})
			cfg.ArtifactFileMode = "0600"
			dir := t.TempDir()
			cfg.ArtifactStoreDir = dir
			cfg.ArtifactStoreURL = strings.ReplaceAll(tc.url, "DIR", dir)
			s, err := OpenArtifactStore(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.Put(t.Context(), "rfs-1/rfs-1.ext4", bytes.NewReader(data), info); err != nil {
				t.Fatal(err)
			}
			var found []string
			_ = filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
				if err == nil && e.Name() == "rfs-1.ext4" {
					fi, _ := e.Info()
					found = append(found, p)
					if fi.Mode().Perm() != tc.want {
						t.Errorf("%s is %v, want %v", p, fi.Mode().Perm(), tc.want)
					}
				}
				return nil
			})
			if len(found) != 1 {
				t.Fatalf("the object is not under %s once: %v", dir, found)
			}
		})
	}
}

// TestWithFileMode: the setting is added to file:// URLs that lack
// file_mode, and to nothing else.
func TestWithFileMode(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"file:///srv/a", "file:///srv/a?file_mode=0600"},
		{"file:///srv/a?create_dir=1", "file:///srv/a?create_dir=1&file_mode=0600"},
		{"file:///srv/a?file_mode=0644", "file:///srv/a?file_mode=0644"},
		{"file:///srv/file_mode=1", "file:///srv/file_mode=1?file_mode=0600"},
		{"mem://?prefix=p", "mem://?prefix=p"},
		{"s3://bkt?endpoint=h:9000", "s3://bkt?endpoint=h:9000"},
		{"file:///srv/a?%zz", "file:///srv/a?%zz"}, // Open refuses it, naming no value
	} {
		if got := withFileMode(tc.in, "0600"); got != tc.want {
			t.Errorf("withFileMode(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
