package harness

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// FiguresEnv names a directory the suites append their figures to (one
// JSON object a line, <suite>.jsonl); make reliability sets it and renders
// docs/reliability.md from the files.
const FiguresEnv = "CUBE_RELIABILITY_OUT"

// Figure is one line of a suite's figures.
type Figure struct {
	Suite    string         `json:"suite"`
	Name     string         `json:"name"`
	Outcome  string         `json:"outcome"`
	Seconds  float64        `json:"seconds"`
	Values   map[string]any `json:"values,omitempty"`
	Proves   string         `json:"proves,omitempty"`
	Recorded time.Time      `json:"recorded"`
}

var figMu sync.Mutex

// Record logs a figure and, when FiguresEnv is set, appends it to the
// suite's file.
func Record(t testing.TB, f Figure) {
	t.Helper()
	f.Recorded = time.Now().UTC()
	b, _ := json.Marshal(f)
	t.Logf("figure: %s", b)
	dir := os.Getenv(FiguresEnv)
	if dir == "" {
		return
	}
	figMu.Lock()
	defer figMu.Unlock()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("figures: %v", err)
		return
	}
	fh, err := os.OpenFile(filepath.Join(dir, f.Suite+".jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Errorf("figures: %v", err)
		return
	}
	defer fh.Close()
	fh.Write(append(b, '\n'))
}
