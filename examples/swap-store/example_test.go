package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/uuid"

	"github.com/cubesandbox/templatecenter/adapters/artifactstore"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// TestRun runs the example once per store combination. The database
// variants use a fresh database each (created here, dropped at the end),
// like the entstore tests, so runs never see each other's rows.
func TestRun(t *testing.T) {
	cases := []struct {
		name      string
		dsn       func(t *testing.T) string
		artifacts func(t *testing.T) string
	}{
		{"sqlite+file", sqliteDSN, fileURL},
		{"sqlite+mem", sqliteDSN, memURL},
		{"mysql+file", mysqlDSN, fileURL},
		{"postgres+mem", postgresDSN, memURL},
		{"sqlite+s3", sqliteDSN, s3URL},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dsn, arts := c.dsn(t), c.artifacts(t)
			var out bytes.Buffer
			if err := run(context.Background(), &out, dsn, arts); err != nil {
				t.Fatalf("run: %v\n%s", err, out.String())
			}
			t.Log("\n" + out.String())
			if !strings.Contains(out.String(), "artifact row rfs-") || !strings.Contains(out.String(), "recorded\n") {
				t.Errorf("first run did not record the row:\n%s", out.String())
			}
			// A second run against the same stores finds the row there and
			// applies no migration.
			out.Reset()
			if err := run(context.Background(), &out, dsn, arts); err != nil {
				t.Fatalf("second run: %v\n%s", err, out.String())
			}
			if !strings.Contains(out.String(), "(0 migrations applied now)") || !strings.Contains(out.String(), "already recorded") {
				t.Errorf("second run:\n%s", out.String())
			}
		})
	}
}

func sqliteDSN(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "tc.db") }

func fileURL(t *testing.T) string { return "file://" + t.TempDir() }

// memURL gives a store that lives as long as its *Store: the second run
// sees an empty one, but the metadata row persists, so it still reads back
// the bytes it has just put again.
func memURL(*testing.T) string { return "mem://" }

// s3URL points at the MinIO bucket under a unique prefix; credentials come
// from the AWS variables, never from the URL.
func s3URL(t *testing.T) string {
	endpoint := testenv.Get(t, testenv.S3Endpoint)
	bucket := testenv.Get(t, testenv.S3Bucket)
	t.Setenv("AWS_ACCESS_KEY_ID", testenv.Get(t, testenv.S3AccessKey))
	t.Setenv("AWS_SECRET_ACCESS_KEY", testenv.Get(t, testenv.S3SecretKey))
	u := "s3://" + bucket + "?" + url.Values{
		"endpoint":       {endpoint},
		"use_path_style": {"true"},
		"region":         {"us-east-1"},
		"prefix":         {"examples-swap-store-" + uuid.NewString()},
	}.Encode()
	t.Cleanup(func() {
		ctx := context.Background()
		s, err := artifactstore.Open(ctx, u)
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer s.Close()
		_, _, _, key := demoArtifact()
		if err := s.Delete(ctx, key); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return u
}

func mysqlDSN(t *testing.T) string {
	base := testenv.Get(t, testenv.MySQLDSN)
	cfg, err := mysql.ParseDSN(base)
	if err != nil {
		t.Fatalf("parse %s: %v", testenv.MySQLDSN, err)
	}
	cfg.DBName = freshDatabase(t, "mysql", base, "DROP DATABASE IF EXISTS %s")
	// The example accepts the mysql:// form as well as the bare driver DSN.
	return "mysql://" + cfg.FormatDSN()
}

func postgresDSN(t *testing.T) string {
	base := testenv.Get(t, testenv.PostgresDSN)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse %s: %v", testenv.PostgresDSN, err)
	}
	u.Path = "/" + freshDatabase(t, "pgx", base, "DROP DATABASE IF EXISTS %s WITH (FORCE)")
	return u.String()
}

// freshDatabase creates a database with a unique name on the server of
// base, drops it when the test ends and returns its name.
func freshDatabase(t *testing.T, driver, base, dropFmt string) string {
	name := "cube_ex_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:16]
	db, err := sql.Open(driver, base)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		_ = db.Close()
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, fmt.Sprintf(dropFmt, name)); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	return name
}
