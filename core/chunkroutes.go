package core

import (
	"net/url"
	"strings"
)

// The chunk protocol beside the artifact download: the same query
// (artifact_id, token) and token header, on the master (which forwards
// them) and on the template center. A node derives both URLs from the
// download URL it was given (ChunkURLs), so they stay under the master
// base URLs it accepts.
const (
	// ChunkIndexPath answers an artifact's chunk index (core/chunk), or
	// 404 when it has none (the node then downloads the whole file).
	ChunkIndexPath = "/cube/template/artifact/chunks/index"
	// ChunkDataPath answers the data chunks first..first+count-1 of the
	// artifact's index (zero chunks are skipped), concatenated.
	ChunkDataPath = "/cube/template/artifact/chunks/data"
	// MaxChunksPerRequest bounds count on ChunkDataPath (64 MiB of the
	// largest chunks).
	MaxChunksPerRequest = 256
)

// ChunkURLs derives the chunk index and chunk data URLs from an artifact
// download URL ending in DownloadPath: same scheme, host, path prefix and
// query. ok is false for a URL of another shape.
func ChunkURLs(download *url.URL) (index, data *url.URL, ok bool) {
	prefix, found := strings.CutSuffix(download.Path, DownloadPath)
	if !found {
		return nil, nil, false
	}
	ix, dt := *download, *download
	ix.Path, ix.RawPath = prefix+ChunkIndexPath, ""
	dt.Path, dt.RawPath = prefix+ChunkDataPath, ""
	return &ix, &dt, true
}
