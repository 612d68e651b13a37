// Package deploy holds no code: its tests check the deployment files next
// to it (systemd units, the Helm chart, the compose file) and the
// repository's Dockerfile, so a renamed variable or binary breaks the
// build instead of an installation.
package deploy
