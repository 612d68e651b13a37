package main

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/uuid"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
	"github.com/cubesandbox/templatecenter/testkit/testenv"
)

// TestServeWithUpstreamConf starts `cubemaster serve` from an upstream
// CubeMaster conf.yaml alone (no --listen, no DSN variable): the listen
// address comes from common.http_bind/http_port, the database from
// instance_db_config (MySQL), the data plane from common.template_center_addr.
func TestServeWithUpstreamConf(t *testing.T) {
	base := testenv.Get(t, testenv.MySQLDSN)
	my, err := mysql.ParseDSN(base)
	if err != nil {
		t.Fatal(err)
	}
	db := freshMySQL(t, base)
	addr := freeAddr(t)
	host, port, _ := net.SplitHostPort(addr)
	conf := fmt.Sprintf(`common:
  http_port: %s
  http_bind: %s
  http_readtimeout: 120
  sync_meta_data_interval: 1s
  template_center_addr: http://127.0.0.1:8090
log:
  module: "cubemaster"
  level: "info"
cubelet_conf:
  grpc:
    grpc_port: 9999
  create_image_timeout_insec: 300
  enable_exposed_port: true
  exposed_port_list:
    - "80"
auth:
  enable: true
  signature_expire_time_insec: 60
  secret_key_map:
    default:
      cube-admin: conf-secret-key-123
instance_db_config:
  addr: %q
  user: %q
  pwd: %q
  db_name: %q
  conn_timeout: 5
  read_timeout: 5
  write_timeout: 5
  max_open_conns: 20
redis:
  nodes: "127.0.0.1:6379"
scheduler:
  priority_select_num: 1
`, port, host, my.Addr, my.User, my.Passwd, db)
	path := filepath.Join(t.TempDir(), "conf.yaml")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &testenv.Buffer{}
	cmd := exec.Command(buildBinary(t), "serve", "--strict-config")
	cmd.Env = cleanEnv("CUBE_MASTER_CONFIG_PATH="+path, "CUBE_TEMPLATE_CALLBACK_TOKEN=e2e-token")
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("cubemaster log:\n%s", logs.String())
		}
	}()
	waitHealthy(t, "http://"+addr+"/notify/health")

	// auth.secret_key_map signs requests as upstream's middleware checks
	// them; an unsigned request is refused with 130401.
	var list struct {
		Ret struct {
			Code int `json:"ret_code"`
		} `json:"ret"`
	}
	resp, err := http.Get("http://" + addr + "/cube/template")
	if err != nil {
		t.Fatal(err)
	}
	decode(t, resp, &list)
	if list.Ret.Code != 130401 {
		t.Fatalf("unsigned list: ret_code %d, want 130401", list.Ret.Code)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/cube/template", nil)
	auth.SetSigned(req.Header, "cube-admin", "conf-secret-key-123", uuid.NewString(), auth.MethodSHA1, time.Now())
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	decode(t, resp, &list)
	if list.Ret.Code != 200 {
		t.Fatalf("signed list on the conf.yaml database: ret_code %d", list.Ret.Code)
	}
	if strings.Contains(logs.String(), "conf-secret-key-123") {
		t.Error("the secret key from conf.yaml is in the log")
	}
	// Upstream keys the master does not use are named once, not refused.
	if !strings.Contains(logs.String(), "upstream settings not used") {
		t.Errorf("no note about unused upstream settings:\n%s", logs.String())
	}
}

// freshMySQL creates a database on the server of base and drops it when
// the test ends.
func freshMySQL(t *testing.T, base string) string {
	t.Helper()
	name := "cube_conf_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:16]
	db, err := sql.Open("mysql", base)
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
		if _, err := db.Exec("DROP DATABASE IF EXISTS " + name); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	return name
}
