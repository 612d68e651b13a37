package data

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// SeedDownloadTokens gives every READY artifact whose download_token
// column holds a token in the clear (an adopted upstream row, or one
// written before tokens were derived) a seed instead (core.DownloadTokens),
// and returns how many it changed. Until then such a row cannot be
// downloaded from this data plane (a keyed check never accepts a clear
// value); afterwards the old value, which any copy of the database shows,
// opens nothing. The data plane runs it when it starts; a row changed
// concurrently (another data plane's) is left as it then is.
func SeedDownloadTokens(ctx context.Context, st ports.Store, ids ports.IDs) (int, error) {
	rows, err := st.Artifacts().ListByStatus(ctx, core.ArtifactReady, time.Time{}, 0)
	if err != nil {
		return 0, fmt.Errorf("list READY artifacts: %w", err)
	}
	n := 0
	for _, a := range rows {
		if a.DownloadToken == "" || core.IsDownloadSeed(a.DownloadToken) {
			continue
		}
		changed := false
		_, err := st.Artifacts().Update(ctx, a.ArtifactID, func(cur *core.Artifact) error {
			if cur.DownloadToken != "" && !core.IsDownloadSeed(cur.DownloadToken) {
				cur.DownloadToken = core.NewDownloadSeed(ids.NewToken())
				changed = true
			}
			return nil
		})
		switch {
		case errors.Is(err, core.ErrNotFound):
		case err != nil:
			return n, fmt.Errorf("seed the download token of artifact %s: %w", a.ArtifactID, err)
		case changed:
			n++
		}
	}
	return n, nil
}
