// Package memprogress is an in-process ports.ProgressSink.
package memprogress

import (
	"context"
	"sync"

	"github.com/cubesandbox/templatecenter/ports"
)

// Sink keeps the last progress of each job in memory.
type Sink struct {
	mu sync.RWMutex
	m  map[string]ports.LiveProgress
}

// New returns an empty sink.
func New() *Sink { return &Sink{m: map[string]ports.LiveProgress{}} }

// Publish records p as the job's latest progress.
func (s *Sink) Publish(_ context.Context, jobID string, p ports.LiveProgress) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[jobID] = p
	return nil
}

// Get returns the latest progress.
func (s *Sink) Get(_ context.Context, jobID string) (ports.LiveProgress, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.m[jobID]
	return p, ok, nil
}

// Delete forgets the job.
func (s *Sink) Delete(_ context.Context, jobID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, jobID)
	return nil
}
