package main

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
	"github.com/cubesandbox/templatecenter/ports/portsmock"
)

const artifact = "rfs-0123456789abcdef01234567"

func TestWarm(t *testing.T) {
	three := []ports.Node{{ID: "n1", Healthy: true}, {ID: "n2", Healthy: true}, {ID: "n3", Healthy: true}}
	errOffline := errors.New("connection refused")

	tests := []struct {
		name     string
		nodes    []ports.Node
		listErr  error
		failOn   map[string]error // CreateImage fails on these nodes
		cancelOn string           // CreateImage cancels the context on this node
		// Expectations.
		wantWarmed []string
		wantCalls  []string // nodes CreateImage was called on, in order
		wantErrIs  []error
		wantInErr  []string
	}{
		{
			name:       "all nodes warmed",
			nodes:      three,
			wantWarmed: []string{"n1", "n2", "n3"},
			wantCalls:  []string{"n1", "n2", "n3"},
		},
		{
			name:       "a failing node does not stop the others",
			nodes:      three,
			failOn:     map[string]error{"n2": errOffline},
			wantWarmed: []string{"n1", "n3"},
			wantCalls:  []string{"n1", "n2", "n3"},
			wantErrIs:  []error{errOffline},
			wantInErr:  []string{"node n2"},
		},
		{
			name:      "no healthy nodes",
			wantErrIs: []error{core.ErrNoTemplateNodes},
		},
		{
			name:      "directory error is wrapped, no node is asked",
			listErr:   core.ErrStoreNotInitialized,
			wantErrIs: []error{core.ErrStoreNotInitialized},
			wantInErr: []string{"list cubebox nodes"},
		},
		{
			name:       "cancellation stops before the next node",
			nodes:      three,
			cancelOn:   "n1",
			wantWarmed: []string{"n1"},
			wantCalls:  []string{"n1"},
			wantErrIs:  []error{context.Canceled},
			wantInErr:  []string{"stopped before node n2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// The mocks' functions give the scripted answers; the mocks
			// themselves record every call. Methods left nil (Get,
			// DestroyImage, ...) panic if called, failing the test.
			dir := &portsmock.NodeDirectoryMock{
				HealthyNodesFunc: func(context.Context, string) ([]ports.Node, error) { return tt.nodes, tt.listErr },
			}
			agent := &portsmock.NodeAgentMock{
				CreateImageFunc: func(_ context.Context, n ports.Node, _ core.NodeArtifact) error {
					if n.ID == tt.cancelOn {
						cancel()
					}
					return tt.failOn[n.ID]
				},
			}

			warmed, err := (&Warmer{Nodes: dir, Agent: agent}).Warm(ctx, "cubebox", artifact)

			if !slices.Equal(warmed, tt.wantWarmed) {
				t.Errorf("warmed %v, want %v", warmed, tt.wantWarmed)
			}
			if (err != nil) != (len(tt.wantErrIs) > 0) {
				t.Fatalf("err = %v, want one matching %v", err, tt.wantErrIs)
			}
			for _, target := range tt.wantErrIs {
				if !errors.Is(err, target) {
					t.Errorf("err = %v, want errors.Is(err, %v)", err, target)
				}
			}
			for _, s := range tt.wantInErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("err = %q, want it to mention %q", err, s)
				}
			}

			// Assert on the recorded calls: the directory was asked once,
			// for the right instance type...
			if calls := dir.HealthyNodesCalls(); len(calls) != 1 || calls[0].InstanceType != "cubebox" {
				t.Errorf("HealthyNodes calls = %+v, want one for cubebox", calls)
			}
			// ...and each node got the artifact, as an ext4, in order.
			var got []string
			for _, c := range agent.CreateImageCalls() {
				got = append(got, c.Node.ID)
				if a := c.Art; a.ArtifactID != artifact || a.InstanceType != "cubebox" {
					t.Errorf("CreateImage on %s with %+v, want artifact %s on cubebox", c.Node.ID, a, artifact)
				}
			}
			if !slices.Equal(got, tt.wantCalls) {
				t.Errorf("CreateImage called on %v, want %v", got, tt.wantCalls)
			}
		})
	}
}

// TestRun runs the program's dry run.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	want := "warmed [node-a node-b]: 1 directory call(s), 2 CreateImage call(s)"
	if !strings.Contains(out.String(), want) {
		t.Errorf("output:\n%s\nwant a line %q", out.String(), want)
	}
}
