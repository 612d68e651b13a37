package harness

import (
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // database/sql driver of the assertions

	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// MariaDB is a private MariaDB server (its own data directory and port),
// started the way scripts/testservers.sh starts the shared one, so a suite
// may kill and restart it without touching anyone else's server.
type MariaDB struct {
	Dir  string
	Port int
	proc *Proc
}

// StartMariaDB installs a data directory and starts mariadbd on a free
// port; it is stopped when the test ends.
func StartMariaDB(t testing.TB) *MariaDB {
	t.Helper()
	testenv.Tool(t, "mariadbd")
	testenv.Tool(t, "mariadb-install-db")
	dir, err := os.MkdirTemp("", "cube-faults-mdb-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	out, err := exec.Command("mariadb-install-db", "--no-defaults", "--user=root", "--datadir="+filepath.Join(dir, "data"),
		"--auth-root-authentication-method=normal", "--skip-test-db").CombinedOutput()
	if err != nil {
		t.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}
	m := &MariaDB{Dir: dir, Port: FreePort(t)}
	m.proc = &Proc{Name: "mariadbd", Bin: "mariadbd", LogPath: filepath.Join(dir, "stdout.log"), Args: []string{
		"--no-defaults", "--user=root", "--datadir=" + filepath.Join(dir, "data"), "--socket=" + filepath.Join(dir, "mysqld.sock"),
		"--port=" + strconv.Itoa(m.Port), "--bind-address=127.0.0.1", "--pid-file=" + filepath.Join(dir, "mysqld.pid"),
		"--log-error=" + filepath.Join(dir, "error.log"), "--skip-name-resolve", "--max-connections=500",
		"--innodb-flush-log-at-trx-commit=2",
	}}
	t.Cleanup(m.proc.Close)
	m.Start(t)
	db := m.Root(t)
	defer db.Close()
	for _, q := range []string{
		"CREATE USER IF NOT EXISTS 'cube'@'127.0.0.1' IDENTIFIED BY 'cube'",
		"GRANT ALL ON *.* TO 'cube'@'127.0.0.1' WITH GRANT OPTION",
		"CREATE DATABASE IF NOT EXISTS cube CHARACTER SET utf8mb4",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return m
}

// Start starts (or restarts) the server and waits until it answers.
func (m *MariaDB) Start(t testing.TB) {
	t.Helper()
	m.proc.Start(t)
	deadline := time.Now().Add(60 * time.Second)
	for {
		db, err := sql.Open("mysql", fmt.Sprintf("root@tcp(127.0.0.1:%d)/", m.Port))
		if err == nil {
			err = db.Ping()
			db.Close()
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) || !m.proc.Running() {
			b, _ := os.ReadFile(filepath.Join(m.Dir, "error.log"))
			t.Fatalf("mariadbd did not come up: %v\n%s", err, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Kill9 kills the server (SIGKILL, by its pid).
func (m *MariaDB) Kill9() { m.proc.Kill9() }

// Stop shuts the server down (SIGTERM).
func (m *MariaDB) Stop() { m.proc.Stop() }

// PID is the server's pid.
func (m *MariaDB) PID() int { return m.proc.PID() }

// Root opens a root connection (no database).
func (m *MariaDB) Root(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", fmt.Sprintf("root@tcp(127.0.0.1:%d)/", m.Port))
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// DSN is the go-sql-driver DSN of database name as user cube.
func (m *MariaDB) DSN(name string) string {
	return fmt.Sprintf("cube:cube@tcp(127.0.0.1:%d)/%s?parseTime=true", m.Port, name)
}

// Redis is a private redis-server the suite may kill.
type Redis struct {
	Addr string
	proc *Proc
}

// StartRedis starts redis-server on a free port (no persistence).
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	testenv.Tool(t, "redis-server")
	dir := t.TempDir()
	port := FreePort(t)
	r := &Redis{Addr: fmt.Sprintf("127.0.0.1:%d", port)}
	r.proc = &Proc{Name: "redis-server", Bin: "redis-server", LogPath: filepath.Join(dir, "redis.log"),
		Args: []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no", "--dir", dir}}
	t.Cleanup(r.proc.Close)
	r.Start(t)
	return r
}

// Start starts (or restarts) the server and waits for its port.
func (r *Redis) Start(t testing.TB) {
	t.Helper()
	r.proc.Start(t)
	WaitTCP(t, r.Addr, 30*time.Second)
}

// Kill9 kills the server (SIGKILL, by its pid).
func (r *Redis) Kill9() { r.proc.Kill9() }

// FreePort returns a loopback port nothing listens on now.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// FreeAddr is 127.0.0.1:FreePort().
func FreeAddr(t testing.TB) string { return fmt.Sprintf("127.0.0.1:%d", FreePort(t)) }

// WaitTCP waits until addr accepts connections.
func WaitTCP(t testing.TB, addr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never accepted connections: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
