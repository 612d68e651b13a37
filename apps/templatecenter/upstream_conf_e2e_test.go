package main

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// TestServeWithUpstreamConf starts `templatecenter serve` from an upstream
// template center conf.yaml alone (no --listen, no DSN variable): the
// listen address comes from common.http_bind/http_port, the database from
// instance_db_config (PostgreSQL), the master from common.master_addr.
func TestServeWithUpstreamConf(t *testing.T) {
	base := testenv.Get(t, testenv.PostgresDSN)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	db := freshPostgres(t, base)
	addr := freeAddr(t)
	host, port, _ := net.SplitHostPort(addr)
	dir := t.TempDir()
	conf := fmt.Sprintf(`common:
  http_bind: %s
  http_port: %s
  master_addr: http://127.0.0.1:8089
log:
  module: "templatecenter"
instance_db_config:
  driver: postgres
  addr: %q
  user: %q
  pwd: %q
  db_name: %q
  conn_timeout: 5
redis:
  nodes: "127.0.0.1:6379"
`, host, port, u.Host, u.User.Username(), pw, db)
	path := filepath.Join(dir, "conf.yaml")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	cmd := exec.Command(filepath.Join(buildBinaries(t), "templatecenter"), "serve", "--strict-config")
	cmd.Env = append(cleanEnviron(),
		"CUBE_TEMPLATE_CENTER_CONFIG_PATH="+path,
		"CUBE_TEMPLATE_CENTER_ARTIFACT_STORE_DIR="+filepath.Join(dir, "store"),
		"CUBE_TEMPLATE_CENTER_ARTIFACT_WORK_DIR="+filepath.Join(dir, "work"),
		"CUBE_TEMPLATE_CALLBACK_TOKEN=e2e-token")
	cmd.Stdout, cmd.Stderr = &lockedWriter{b: &logs}, &lockedWriter{b: &logs}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		if t.Failed() {
			logMu.Lock()
			t.Logf("templatecenter log:\n%s", logs.String())
			logMu.Unlock()
		}
	}()
	waitHealthy(t, "http://"+addr+"/health")
}

// cleanEnviron is the environment without CUBE_* settings.
func cleanEnviron() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CUBE_") && !strings.HasPrefix(kv, "CUBEMASTER_") {
			env = append(env, kv)
		}
	}
	return env
}

// lockedWriter serializes the two output streams into one builder.
type lockedWriter struct{ b *strings.Builder }

var logMu sync.Mutex

func (w *lockedWriter) Write(p []byte) (int, error) {
	logMu.Lock()
	defer logMu.Unlock()
	return w.b.Write(p)
}

// freshPostgres creates a database on the server of base and drops it when
// the test ends.
func freshPostgres(t *testing.T, base string) string {
	t.Helper()
	name := "cube_conf_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:16]
	db, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		db.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer db.Close()
		if _, err := db.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	return name
}
