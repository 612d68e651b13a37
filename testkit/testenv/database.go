package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
)

// Database makes a new, empty database of dialect ("sqlite", "mysql" or
// "postgres") on the test servers and returns its DSN (in the form the
// store opens: a MySQL driver DSN, a postgres:// URL, a sqlite:// path)
// and how to drop it. dir holds SQLite files. The servers are taken from
// MySQLDSN and PostgresDSN as Get does.
func Database(ctx context.Context, t testing.TB, dialect, dir string) (dsn string, drop func() error, err error) {
	t.Helper()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	name := "cube_t_" + hex.EncodeToString(b)
	switch dialect {
	case "sqlite":
		return "sqlite://" + filepath.Join(dir, name+".db"), func() error { return nil }, nil
	case "mysql":
		base := Get(t, MySQLDSN)
		cfg, err := mysql.ParseDSN(base)
		if err != nil {
			return "", nil, fmt.Errorf("parse %s: %w", MySQLDSN, err)
		}
		// A case-insensitive database default on purpose: tables must
		// bring their own binary collation for 'Foo' and 'foo' to differ.
		drop, err := admin(ctx, "mysql", base, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci", "DROP DATABASE IF EXISTS "+name)
		if err != nil {
			return "", nil, err
		}
		cfg.DBName = name
		cfg.ParseTime = true
		return cfg.FormatDSN(), drop, nil
	case "postgres":
		base := Get(t, PostgresDSN)
		u, err := url.Parse(base)
		if err != nil {
			return "", nil, fmt.Errorf("parse %s: %w", PostgresDSN, err)
		}
		drop, err := admin(ctx, "pgx", base, "CREATE DATABASE "+name, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		if err != nil {
			return "", nil, err
		}
		u.Path = "/" + name
		return u.String(), drop, nil
	}
	return "", nil, fmt.Errorf("unknown dialect %s", dialect)
}

// admin runs create on the server of base and returns the matching drop.
func admin(ctx context.Context, driver, base, create, drop string) (func() error, error) {
	exec := func(ctx context.Context, q string) error {
		db, err := sql.Open(driver, base)
		if err != nil {
			return err
		}
		defer db.Close()
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
		return nil
	}
	if err := exec(ctx, create); err != nil {
		return nil, err
	}
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return exec(ctx, drop)
	}, nil
}
