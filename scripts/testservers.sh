#!/usr/bin/env bash
# Starts (or stops) the real servers the integration tests use, on loopback:
# MariaDB, PostgreSQL, Redis, an OCI registry, an S3-protocol server (MinIO)
# and a GCS emulator (fake-gcs-server); the last two are Go programs built
# with `go install` and run as external tools, never imported. Installs
# missing packages on a new
# Debian machine. Prints the environment the tests read; `source` the file it
# writes ($CUBE_TEST_SERVERS_DIR/env) to use them.
#
#   scripts/testservers.sh start [SERVICE...]  # install what is missing, start all
#                                              # (or: mariadb postgres redis registry minio fakegcs), write env
#   scripts/testservers.sh stop    # stop what start started (by pid file)
set -Eeuo pipefail

DIR=${CUBE_TEST_SERVERS_DIR:-/tmp/cube-test-servers}
# Below Linux's ephemeral range (32768-60999 by default): a port in it can be
# held by any outgoing connection at the moment a server binds it.
MYSQL_PORT=${CUBE_TEST_MYSQL_PORT:-23306}
PG_PORT=${CUBE_TEST_PG_PORT:-25432}
REDIS_PORT=${CUBE_TEST_REDIS_PORT:-26379}
REGISTRY_PORT=${CUBE_TEST_REGISTRY_PORT:-25000}
S3_PORT=${CUBE_TEST_S3_PORT:-29000}
GCS_PORT=${CUBE_TEST_GCS_PORT:-24443}
MINIO_VERSION=${CUBE_TEST_MINIO_VERSION:-v0.0.0-20260212201848-7aac2a2c5b7c}
FAKE_GCS_VERSION=${CUBE_TEST_FAKE_GCS_VERSION:-v1.56.1}
GOBIN_DIR=$(go env GOPATH 2>/dev/null || echo /root/go)/bin

log() { echo "testservers: $*" >&2; }
trap 'log "failed at line $LINENO: $BASH_COMMAND"' ERR

wait_for() { # name, tries, command...
  local name=$1 tries=$2; shift 2
  for _ in $(seq "$tries"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  log "$name did not become ready"; return 1
}

pg_bin() {
  local d
  for d in /usr/lib/postgresql/*/bin; do [ -x "$d/initdb" ] && { echo "$d"; return; }; done
}

install_missing() {
  local pkgs=()
  command -v mariadbd >/dev/null || pkgs+=(mariadb-server)
  command -v redis-server >/dev/null || pkgs+=(redis-server)
  command -v docker-registry >/dev/null || pkgs+=(docker-registry)
  [ -n "$(pg_bin)" ] || pkgs+=(postgresql)
  command -v mkfs.ext4 >/dev/null || pkgs+=(e2fsprogs)
  command -v skopeo >/dev/null || pkgs+=(skopeo)
  command -v umoci >/dev/null || pkgs+=(umoci)
  command -v getfattr >/dev/null || pkgs+=(attr)
  command -v igzip >/dev/null || pkgs+=(isal)
  command -v curl >/dev/null || pkgs+=(curl)
  if [ ${#pkgs[@]} -gt 0 ]; then
    log "installing ${pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${pkgs[@]}" >/dev/null
  fi
  if [ -z "${SKIP_MINIO:-}" ] && [ ! -x "$GOBIN_DIR/minio" ] && ! command -v minio >/dev/null; then
    log "building minio $MINIO_VERSION (external test tool, never imported)"
    GOFLAGS=-buildvcs=false go install "github.com/minio/minio@$MINIO_VERSION"
  fi
  if [ -z "${SKIP_FAKEGCS:-}" ] && [ ! -x "$GOBIN_DIR/fake-gcs-server" ] && ! command -v fake-gcs-server >/dev/null; then
    log "building fake-gcs-server $FAKE_GCS_VERSION (external test tool, never imported)"
    GOFLAGS=-buildvcs=false go install "github.com/fsouza/fake-gcs-server@$FAKE_GCS_VERSION"
  fi
}

start_mariadb() {
  local d=$DIR/mariadb
  if [ -f "$d/mysqld.pid" ] && kill -0 "$(cat "$d/mysqld.pid")" 2>/dev/null; then return; fi
  mkdir -p "$d"
  if [ ! -d "$d/data/mysql" ]; then
    mariadb-install-db --no-defaults --user=root --datadir="$d/data" \
      --auth-root-authentication-method=normal --skip-test-db >"$d/install.log" 2>&1 ||
      { cat "$d/install.log" >&2; return 1; }
  fi
  mariadbd --no-defaults --user=root --datadir="$d/data" --socket="$d/mysqld.sock" \
    --port="$MYSQL_PORT" --bind-address=127.0.0.1 --pid-file="$d/mysqld.pid" \
    --log-error="$d/error.log" --skip-name-resolve --max-connections=500 \
    --innodb-flush-log-at-trx-commit=2 >/dev/null 2>&1 &
  wait_for mariadb 100 mariadb-admin --no-defaults -h127.0.0.1 -P"$MYSQL_PORT" -uroot ping
  mariadb --no-defaults -h127.0.0.1 -P"$MYSQL_PORT" -uroot -e \
    "CREATE USER IF NOT EXISTS 'cube'@'127.0.0.1' IDENTIFIED BY 'cube'; GRANT ALL ON *.* TO 'cube'@'127.0.0.1' WITH GRANT OPTION; CREATE DATABASE IF NOT EXISTS cube;"
}

start_postgres() {
  local d=$DIR/postgres bin; bin=$(pg_bin)
  if [ -f "$d/data/postmaster.pid" ] && kill -0 "$(head -1 "$d/data/postmaster.pid")" 2>/dev/null; then return; fi
  mkdir -p "$d"; chown postgres: "$d"
  if [ ! -f "$d/data/PG_VERSION" ]; then
    runuser -u postgres -- "$bin/initdb" -D "$d/data" -U postgres --auth=trust >"$d/initdb.log" 2>&1 ||
      { cat "$d/initdb.log" >&2; return 1; }
  fi
  runuser -u postgres -- "$bin/pg_ctl" -D "$d/data" -l "$d/server.log" -w \
    -o "-p $PG_PORT -k $d -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300" start >/dev/null
  psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -tAc "SELECT 1 FROM pg_roles WHERE rolname='cube'" | grep -q 1 ||
    psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -qc "CREATE ROLE cube LOGIN SUPERUSER PASSWORD 'cube'"
  psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='cube'" | grep -q 1 ||
    psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -qc "CREATE DATABASE cube OWNER cube"
}

start_redis() {
  local d=$DIR/redis
  if [ -f "$d/redis.pid" ] && kill -0 "$(cat "$d/redis.pid")" 2>/dev/null; then return; fi
  mkdir -p "$d"
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --dir "$d" \
    --daemonize yes --pidfile "$d/redis.pid" --logfile "$d/redis.log"
  wait_for redis 50 redis-cli -p "$REDIS_PORT" ping
}

start_registry() {
  local d=$DIR/registry
  if [ -f "$d/registry.pid" ] && kill -0 "$(cat "$d/registry.pid")" 2>/dev/null; then return; fi
  mkdir -p "$d/data"
  cat >"$d/config.yml" <<YML
version: 0.1
log: {level: error}
storage:
  filesystem: {rootdirectory: $d/data}
  delete: {enabled: true}
http: {addr: 127.0.0.1:$REGISTRY_PORT}
YML
  docker-registry serve "$d/config.yml" >"$d/registry.log" 2>&1 &
  echo $! >"$d/registry.pid"
  wait_for registry 50 curl -fsS "http://127.0.0.1:$REGISTRY_PORT/v2/"
}

start_minio() {
  local d=$DIR/minio bin
  bin=$(command -v minio || echo "$GOBIN_DIR/minio")
  if [ -f "$d/minio.pid" ] && kill -0 "$(cat "$d/minio.pid")" 2>/dev/null; then return; fi
  mkdir -p "$d/data"
  MINIO_ROOT_USER=minioadmin MINIO_ROOT_PASSWORD=minioadmin MINIO_BROWSER=off \
    "$bin" server "$d/data" --address "127.0.0.1:$S3_PORT" --console-address "127.0.0.1:$((S3_PORT + 1))" \
    >"$d/minio.log" 2>&1 &
  echo $! >"$d/minio.pid"
  wait_for minio 150 curl -fsS "http://127.0.0.1:$S3_PORT/minio/health/live"
  curl -fsS --aws-sigv4 "aws:amz:us-east-1:s3" --user minioadmin:minioadmin -X PUT \
    "http://127.0.0.1:$S3_PORT/cube-test" >/dev/null 2>&1 || true
}

# start_fakegcs runs the GCS emulator over plain HTTP with an in-memory
# backend. Its public host is its own address, so signed URLs (path style,
# host from STORAGE_EMULATOR_HOST) are served by it too.
start_fakegcs() {
  local d=$DIR/fakegcs bin
  bin=$(command -v fake-gcs-server || echo "$GOBIN_DIR/fake-gcs-server")
  if [ -f "$d/fakegcs.pid" ] && kill -0 "$(cat "$d/fakegcs.pid")" 2>/dev/null; then return; fi
  mkdir -p "$d"
  "$bin" -scheme http -host 127.0.0.1 -port "$GCS_PORT" -backend memory \
    -public-host "127.0.0.1:$GCS_PORT" -external-url "http://127.0.0.1:$GCS_PORT" -log-level warn \
    >"$d/fakegcs.log" 2>&1 &
  echo $! >"$d/fakegcs.pid"
  wait_for fake-gcs-server 100 curl -fsS "http://127.0.0.1:$GCS_PORT/storage/v1/b"
  curl -fsS -X POST -H 'Content-Type: application/json' -d '{"name":"cube-test"}' \
    "http://127.0.0.1:$GCS_PORT/storage/v1/b?project=cube-test" >/dev/null 2>&1 || true
}

write_env() {
  cat >"$DIR/env" <<ENV
export CUBE_TEST_MYSQL_DSN='cube:cube@tcp(127.0.0.1:$MYSQL_PORT)/cube?parseTime=true'
export CUBE_TEST_POSTGRES_DSN='postgres://cube:cube@127.0.0.1:$PG_PORT/cube?sslmode=disable'
export CUBE_TEST_REDIS_ADDR='127.0.0.1:$REDIS_PORT'
export CUBE_TEST_REGISTRY='127.0.0.1:$REGISTRY_PORT'
export CUBE_TEST_S3_ENDPOINT='http://127.0.0.1:$S3_PORT'
export CUBE_TEST_S3_BUCKET='cube-test'
export CUBE_TEST_S3_ACCESS_KEY='minioadmin'
export CUBE_TEST_S3_SECRET_KEY='minioadmin'
export CUBE_TEST_GCS_ENDPOINT='http://127.0.0.1:$GCS_PORT'
export CUBE_TEST_GCS_BUCKET='cube-test'
ENV
  cat "$DIR/env"
}

stop_all() {
  local f pids=()
  for f in "$DIR/registry/registry.pid" "$DIR/minio/minio.pid" "$DIR/fakegcs/fakegcs.pid" "$DIR/redis/redis.pid" "$DIR/mariadb/mysqld.pid"; do
    if [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; then pids+=("$(cat "$f")"); fi
  done
  if [ -f "$DIR/postgres/data/postmaster.pid" ]; then
    runuser -u postgres -- "$(pg_bin)/pg_ctl" -D "$DIR/postgres/data" -m fast stop >/dev/null 2>&1 || true
  fi
  # Wait (up to 10 s) for them to exit, so a caller may remove $DIR.
  local p _
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
  done
}

case "${1:-start}" in
  start)
    shift || true
    services=("$@")
    [ ${#services[@]} -gt 0 ] || services=(mariadb postgres redis registry minio fakegcs)
    mkdir -p "$DIR"
    chmod 0755 "$DIR" # the postgres user must reach its data dir
    [[ " ${services[*]} " == *" minio "* ]] || export SKIP_MINIO=1
    [[ " ${services[*]} " == *" fakegcs "* ]] || export SKIP_FAKEGCS=1
    install_missing
    for s in "${services[@]}"; do "start_$s"; done
    write_env
    ;;
  stop) stop_all ;;
  env) cat "$DIR/env" ;;
  *) echo "usage: $0 start|stop|env" >&2; exit 2 ;;
esac
