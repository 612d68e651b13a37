package bench

import (
	"strings"
	"testing"
	"time"
)

func TestMedianPercentileRatio(t *testing.T) {
	s := time.Second
	if m := Median([]time.Duration{3 * s, 1 * s, 2 * s}); m != 2*s {
		t.Errorf("median of 3 = %v", m)
	}
	if m := Median([]time.Duration{4 * s, 1 * s, 2 * s, 3 * s}); m != 2500*time.Millisecond {
		t.Errorf("median of 4 = %v", m)
	}
	if Median(nil) != 0 || Percentile(nil, 99) != 0 || Ratio(s, 0) != 0 {
		t.Error("empty input")
	}
	var ds []time.Duration
	for i := 1; i <= 1000; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	if p := Percentile(ds, 99); p != 990*time.Millisecond {
		t.Errorf("p99 = %v", p)
	}
	if p := Percentile(ds, 100); p != time.Second {
		t.Errorf("p100 = %v", p)
	}
	if r := Ratio(10*s, 4*s); r != 2.5 {
		t.Errorf("ratio = %v", r)
	}
}

func TestSummarizeAndTable(t *testing.T) {
	runs := []Run{
		{Pipeline: "b", Wall: 2 * time.Second, PeakRSS: 10, Phases: map[string]int64{"x": 100}},
		{Pipeline: "a", Wall: 1 * time.Second},
		{Pipeline: "b", Wall: 4 * time.Second, PeakRSS: 30, Phases: map[string]int64{"x": 300}},
	}
	sums := Summarize(runs)
	if len(sums) != 2 || sums[0].Pipeline != "b" || sums[0].Median != 3*time.Second || sums[0].Fastest != 2*time.Second ||
		sums[0].PeakRSS != 30 || sums[0].Phases["x"] != 200 {
		t.Fatalf("%+v", sums)
	}
	var b strings.Builder
	Table{Header: []string{"a", "b"}, Rows: [][]string{{"1", "2"}}}.Write(&b)
	if b.String() != "| a | b |\n|---|---|\n| 1 | 2 |\n" {
		t.Errorf("table:\n%s", b.String())
	}
}

// TestPastBuild: a job the master already distributes counts as built; a
// poll that missed the brief BUILT status once made "distribution" 0 s
// and "build" the whole create -> READY.
func TestPastBuild(t *testing.T) {
	for _, c := range []struct {
		status, phase string
		want          bool
	}{
		{"PENDING", "", false},
		{"RUNNING", "PULLING", false},
		{"RUNNING", "BUILDING_EXT4", false},
		{"RUNNING", "UPLOADING", false},
		{"BUILT", "UPLOADING", true},
		{"RUNNING", "REGISTERING", true},
		{"RUNNING", "DISTRIBUTING", true},
		{"RUNNING", "SNAPSHOTTING", true},
		{"READY", "READY", true},
		{"FAILED", "DISTRIBUTING", false},
	} {
		if got := pastBuild(c.status, c.phase); got != c.want {
			t.Errorf("pastBuild(%s, %s) = %v, want %v", c.status, c.phase, got, c.want)
		}
	}
}

// Even rounds run the pipelines in reverse, each warm build still right
// after its cold one.
func TestRoundOrder(t *testing.T) {
	ps := []pipeline{{name: "a cold"}, {name: "a warm", follows: true}, {name: "b cold"}, {name: "b warm", follows: true}, {name: "upstream"}, {name: "bound"}}
	names := func(ps []pipeline) string {
		var n []string
		for _, p := range ps {
			n = append(n, p.name)
		}
		return strings.Join(n, ", ")
	}
	for _, tt := range []struct {
		round int
		want  string
	}{
		{1, "a cold, a warm, b cold, b warm, upstream, bound"},
		{2, "bound, upstream, b cold, b warm, a cold, a warm"},
		{3, "a cold, a warm, b cold, b warm, upstream, bound"},
	} {
		if got := names(roundOrder(ps, tt.round)); got != tt.want {
			t.Errorf("round %d: %s, want %s", tt.round, got, tt.want)
		}
	}
}
