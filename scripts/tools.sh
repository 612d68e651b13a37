#!/usr/bin/env bash
# Installs the external programs some tests run (never imported), with the
# Go toolchain only, into $(go env GOPATH)/bin:
#   helm   renders deploy/helm in deploy's tests (helm template)
# Already installed (on PATH or in GOPATH/bin): nothing to do.
set -euo pipefail
HELM_VERSION=${CUBE_TEST_HELM_VERSION:-v3.22.0}
GOBIN_DIR=$(go env GOPATH)/bin

if ! command -v helm >/dev/null && [ ! -x "$GOBIN_DIR/helm" ]; then
  echo "tools: building helm $HELM_VERSION (about two minutes the first time)" >&2
  GOFLAGS=-buildvcs=false go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
fi
