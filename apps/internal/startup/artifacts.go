package startup

import (
	"strings"

	"github.com/cubesandbox/templatecenter/adapters/artifactstore"
	"github.com/cubesandbox/templatecenter/apps/config"
)

// StoreKind names the kind of artifact store the data plane's settings
// open (tcapp.OpenArtifactStore): the scheme of
// CUBE_TEMPLATE_CENTER_ARTIFACT_STORE_URL, else s3 for upstream's S3
// settings, else file for the local directory. The master, which opens no
// store, learns from it which kind a migrate may ask for.
func StoreKind(cfg config.Config) string {
	if scheme, _, ok := strings.Cut(cfg.ArtifactStoreURL, "://"); ok && scheme != "" {
		return scheme
	}
	if cfg.S3.Enabled() {
		return artifactstore.BackendS3
	}
	return artifactstore.BackendFile
}
