package ports

import (
	"context"
	"io"

	"github.com/cubesandbox/templatecenter/core"
)

// EnvdSource supplies the agent binary injected into templates that opt in
// with the cube.master.inject_envd="true" container annotation.
type EnvdSource interface {
	// Envd returns the binary's bytes, read at each call so replacing it
	// needs no restart. An error wrapping core.ErrNotFound means there is
	// no binary (requests that opt in are then refused); an empty binary is
	// an error wrapping core.ErrInvalidArgument.
	Envd(ctx context.Context) ([]byte, error)
}

// CubeCASource supplies the CubeEgress root CA baked into templates that
// want it (with_cube_ca, true unless a request says false).
type CubeCASource interface {
	// CubeCA returns the installed CA, one PEM certificate (it passes
	// core.ParseCubeCA), read at each call so a rotation needs no
	// restart. An error wrapping core.ErrNotFound means no CA is installed
	// (templates are then built without it, and say so); anything
	// installed that is not one PEM certificate of at most
	// core.MaxCubeCABytes is an error wrapping core.ErrInvalidArgument. An
	// error never comes with bytes.
	CubeCA(ctx context.Context) ([]byte, error)
}

// LegacyArtifacts reaches artifacts that older deployments kept on the
// master's own disk, for migrate (tpl merge). Paths come from the database,
// so an implementation opens or removes only files inside the roots it was
// configured with, never following a path or link outside them.
type LegacyArtifacts interface {
	// Open returns the local copy of a (located by a.Ext4Path) and its
	// size; an error wrapping core.ErrNotFound when there is none or the
	// path lies outside every root (an empty or relative path, and one
	// whose ".." climbs out, lie outside). A path inside a root that leads
	// outside through a symbolic link is refused with an error that need
	// not wrap core.ErrNotFound.
	Open(ctx context.Context, a *core.Artifact) (io.ReadCloser, int64, error)
	// Remove deletes the local copy once the artifact store holds the
	// bytes. A missing copy, a path outside the roots and a copy that may
	// be the store's own object (a.StorageBackend "file", "local" or "")
	// are left alone without an error. Through a symbolic link leading
	// outside nothing outside is removed; that may be refused with an
	// error.
	Remove(ctx context.Context, a *core.Artifact) error
}

// ReleaseManifests reads the release manifest the one-click bundle ships:
// the component versions templates are checked against (compat).
type ReleaseManifests interface {
	// Manifest returns the manifest, or nil and no error when none is
	// installed. A manifest that is present but unreadable or malformed is
	// an error: it means a broken install rather than an absent one. It is
	// read at each call, so a rescan sees a manifest installed, replaced or
	// removed since.
	Manifest(ctx context.Context) (*core.ReleaseManifest, error)
}
