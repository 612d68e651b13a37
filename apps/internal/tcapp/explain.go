package tcapp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/registry"
	"github.com/cubesandbox/templatecenter/ports"
)

// explained adds to registry errors what the operator can do about them:
// a refused address names the settings that allow it, and a registry that
// stops answering is reported as stalled with the timeout that ended it.
// Resolving is bounded by the timeout as a whole (a stalled registry would
// otherwise be retried until the job's own stale bound).
type explained struct {
	ports.ImageSource
	timeout time.Duration
}

// explainSource wraps src.
func explainSource(src ports.ImageSource, timeout time.Duration) ports.ImageSource {
	return explained{ImageSource: src, timeout: timeout}
}

func (e explained) StreamLayers(ctx context.Context, req ports.ImageRequest, img *ports.ResolvedImage, progress func(ports.PullProgress)) ([]ports.StreamedLayer, func() ([]ports.LocalLayer, error), error) {
	layers, wait, err := e.ImageSource.StreamLayers(ctx, req, img, progress)
	if err != nil {
		return nil, nil, e.explain(err)
	}
	return layers, func() ([]ports.LocalLayer, error) {
		local, err := wait()
		return local, e.explain(err)
	}, nil
}

func (e explained) Resolve(ctx context.Context, req ports.ImageRequest) (*ports.ResolvedImage, error) {
	rctx := ctx
	if e.timeout > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, e.timeout)
		defer cancel()
	}
	img, err := e.ImageSource.Resolve(rctx, req)
	if err != nil && ctx.Err() == nil && errors.Is(rctx.Err(), context.DeadlineExceeded) {
		return nil, fmt.Errorf("registry stalled: resolving %s took longer than %s (CUBE_TEMPLATE_CENTER_REGISTRY_TIMEOUT): %w", req.Ref, e.timeout, err)
	}
	return img, e.explain(err)
}

// explain wraps err (keeping everything errors.Is matches) with a hint.
func (e explained) explain(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, registry.ErrEgressDenied):
		return fmt.Errorf("%w; to allow a registry on a loopback or private address add its host:port to "+
			"CUBE_TEMPLATE_CENTER_INSECURE_REGISTRIES (plain HTTP) or CUBE_TEMPLATE_CENTER_TRUSTED_REGISTRIES (HTTPS), "+
			"or pass --insecure-registry / --allow-registry", err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("registry stalled: no data for %s (CUBE_TEMPLATE_CENTER_REGISTRY_TIMEOUT): %w", e.timeout, err)
	}
	return err
}
