#!/usr/bin/env bash
# Installs the binaries, the units and the settings on this host:
#   bin/* (make build)      -> $DESTDIR/usr/local/bin
#   *.service               -> $DESTDIR/etc/systemd/system
#   cube.env                -> $DESTDIR/etc/cube/cube.env (kept if present)
#   a new callback token    -> $DESTDIR/etc/cube/token.env (mode 0600, kept if present)
#   a new public API token  -> $DESTDIR/etc/cube/api-token.env (mode 0600, kept if present;
#                              the master's CUBE_MASTER_AUTH_BEARER_TOKENS, and
#                              CUBE_MASTER_TOKEN for cubemastercli: `set -a; . /etc/cube/api-token.env`)
#   a new node credential   -> $DESTDIR/etc/cube/node-token.env (mode 0600, kept if present;
#                              CUBE_MASTER_NODE_TOKEN and CUBE_NODEAGENT_TOKEN, one value: copy
#                              this file to every node agent's host)
#   a new sealing key       -> $DESTDIR/etc/cube/sealing.keys (mode 0600, kept if present;
#                              CUBE_MASTER_SEALING_KEY_FILE: seals the registry credentials
#                              kept for redo; every master replica needs the same file)
# Then, as root on the host: systemctl daemon-reload &&
#   systemctl enable --now templatecenter cubemaster nodeagent
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-$here/../../bin}
DESTDIR=${DESTDIR:-}

install -d -m 0755 "$DESTDIR/usr/local/bin" "$DESTDIR/etc/systemd/system"
install -d -m 0750 "$DESTDIR/etc/cube"
for b in templatecenter cubemaster nodeagent cubemastercli ext4stream; do
  install -m 0755 "$BIN/$b" "$DESTDIR/usr/local/bin/$b"
done
for u in templatecenter cubemaster nodeagent; do
  install -m 0644 "$here/$u.service" "$DESTDIR/etc/systemd/system/$u.service"
done
[ -e "$DESTDIR/etc/cube/cube.env" ] || install -m 0644 "$here/cube.env" "$DESTDIR/etc/cube/cube.env"
if [ ! -e "$DESTDIR/etc/cube/token.env" ]; then
  # 32 random bytes as hex: the shared secret of the internal routes.
  token=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
  (umask 077 && printf 'CUBE_TEMPLATE_CALLBACK_TOKEN=%s\n' "$token" > "$DESTDIR/etc/cube/token.env")
fi
if [ ! -e "$DESTDIR/etc/cube/api-token.env" ]; then
  # The public /cube/* API's bearer token (cubemaster serve refuses to start
  # without a credential unless CUBE_MASTER_AUTH=false).
  api=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
  (umask 077 && printf 'CUBE_MASTER_AUTH_BEARER_TOKENS=%s\nCUBE_MASTER_TOKEN=%s\n' "$api" "$api" > "$DESTDIR/etc/cube/api-token.env")
fi
if [ ! -e "$DESTDIR/etc/cube/node-token.env" ]; then
  # The node credential: the master sends it on every call to a node, and
  # the node agent refuses calls without it (and will not start without it).
  node=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
  (umask 077 && printf 'CUBE_MASTER_NODE_TOKEN=%s\nCUBE_NODEAGENT_TOKEN=%s\n' "$node" "$node" > "$DESTDIR/etc/cube/node-token.env")
fi
if [ ! -e "$DESTDIR/etc/cube/sealing.keys" ]; then
  # The key that seals the registry credentials the master keeps for redo
  # (id:secret; to rotate, put a new line first and restart the master).
  id=$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
  key=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
  (umask 077 && printf '# Sealing keys of cubemaster: id:secret, the first seals, all open.\nk%s:%s\n' "$id" "$key" > "$DESTDIR/etc/cube/sealing.keys")
fi
echo "installed; now: systemctl daemon-reload && systemctl enable --now templatecenter cubemaster nodeagent"
