package tcapp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/registry"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// stuckSource is an ImageSource whose Resolve blocks until its context
// ends (a registry that accepted the connection and went silent) and
// whose StreamLayers fails with err.
type stuckSource struct{ err error }

func (s stuckSource) Resolve(ctx context.Context, _ ports.ImageRequest) (*ports.ResolvedImage, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (s stuckSource) StreamLayers(context.Context, ports.ImageRequest, *ports.ResolvedImage, func(ports.PullProgress)) ([]ports.StreamedLayer, func() ([]ports.LocalLayer, error), error) {
	return nil, nil, s.err
}

func TestRegistryErrorsSayWhatToDo(t *testing.T) {
	refused := fmt.Errorf("blob x: 127.0.0.1 resolves to loopback 127.0.0.1 and is not a trusted registry host: %w (%w)", registry.ErrEgressDenied, core.ErrInvalidArgument)
	cases := []struct {
		name string
		err  error
		want []string
		is   error
	}{
		{"refused address", refused, []string{"CUBE_TEMPLATE_CENTER_INSECURE_REGISTRIES", "--insecure-registry", "--allow-registry"}, core.ErrInvalidArgument},
		{"stalled download", fmt.Errorf("read tcp: %w", os.ErrDeadlineExceeded), []string{"registry stalled", "CUBE_TEMPLATE_CENTER_REGISTRY_TIMEOUT"}, os.ErrDeadlineExceeded},
		{"other", errors.New("manifest unknown"), []string{"manifest unknown"}, nil},
	}
	for _, tc := range cases {
		src := explained{ImageSource: stuckSource{err: tc.err}, timeout: time.Minute}
		_, _, err := src.StreamLayers(t.Context(), ports.ImageRequest{}, nil, nil)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v lacks %q", tc.name, err, w)
			}
		}
		if tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("%s: %v no longer matches %v", tc.name, err, tc.is)
		}
	}
}

func TestStalledResolveIsBoundedAndNamed(t *testing.T) {
	src := explained{ImageSource: stuckSource{}, timeout: 20 * time.Millisecond}
	_, err := src.Resolve(t.Context(), ports.ImageRequest{Ref: "127.0.0.1:1/x:1"})
	if err == nil || !strings.Contains(err.Error(), "registry stalled") || !strings.Contains(err.Error(), "CUBE_TEMPLATE_CENTER_REGISTRY_TIMEOUT") {
		t.Fatalf("err = %v, want a stalled registry naming the timeout setting", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := src.Resolve(ctx, ports.ImageRequest{}); err == nil || strings.Contains(err.Error(), "stalled") {
		t.Fatalf("a cancelled build is reported as %v, not as a stalled registry", err)
	}
}

// Streaming errors get the hints from the start of the stream and from
// its end.
func TestStreamErrorsSayWhatToDo(t *testing.T) {
	stalled := fmt.Errorf("read tcp: %w", os.ErrDeadlineExceeded)
	for _, s := range []failingStreamer{{startErr: stalled}, {waitErr: stalled}} {
		st := explainSource(s, time.Minute)
		_, wait, err := st.StreamLayers(t.Context(), ports.ImageRequest{}, nil, nil)
		if err == nil {
			_, err = wait()
		}
		if err == nil || !strings.Contains(err.Error(), "CUBE_TEMPLATE_CENTER_REGISTRY_TIMEOUT") || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("stream error not explained: %v", err)
		}
	}
}

// failingStreamer streams nothing: StreamLayers fails with startErr, or
// its wait with waitErr.
type failingStreamer struct {
	stuckSource
	startErr, waitErr error
}

func (f failingStreamer) StreamLayers(context.Context, ports.ImageRequest, *ports.ResolvedImage, func(ports.PullProgress)) ([]ports.StreamedLayer, func() ([]ports.LocalLayer, error), error) {
	if f.startErr != nil {
		return nil, nil, f.startErr
	}
	return nil, func() ([]ports.LocalLayer, error) { return nil, f.waitErr }, nil
}
