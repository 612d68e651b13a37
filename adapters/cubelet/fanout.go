package cubelet

import (
	"context"
	"sync"

	"github.com/cubesandbox/templatecenter/ports"
)

// DefaultFanOut is how many nodes FanOut calls at once when limit <= 0,
// upstream's distribution worker count.
const DefaultFanOut = 4

// FanOut calls fn for every node, at most limit at a time (DefaultFanOut
// when limit <= 0), and waits for all of them. errs[i] is the outcome for
// nodes[i]. Once ctx is done, nodes not yet started are not called and get
// ctx.Err(); calls already running see the cancelled ctx.
func FanOut(ctx context.Context, nodes []ports.Node, limit int, fn func(ctx context.Context, node ports.Node) error) []error {
	if limit <= 0 {
		limit = DefaultFanOut
	}
	errs := make([]error, len(nodes))
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i, n := range nodes {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			errs[i] = ctx.Err()
			continue
		}
		// A slot may have been free at the same moment ctx ended.
		if err := ctx.Err(); err != nil {
			<-sem
			errs[i] = err
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = fn(ctx, n)
		})
	}
	wg.Wait()
	return errs
}
