package bench

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestPerEntryAndLinearity(t *testing.T) {
	s := time.Second
	for _, tt := range []struct {
		name                 string
		small, big           int64
		es, eb               int
		want                 float64
		wallSmall, wallBig   time.Duration
		wantLinear           float64
		approxLinear, approx bool
	}{
		// The figures: 136 MiB at 28k entries, 344 MiB at 149k.
		{name: "issue", small: 136 << 20, big: 344 << 20, es: 28_000, eb: 149_000, want: float64(208<<20) / 121_000,
			wallSmall: 5500 * time.Millisecond, wallBig: 23100 * time.Millisecond, wantLinear: (23.1 / 149_000) / (5.5 / 28_000)},
		{name: "flat memory, linear time", small: 100, big: 100, es: 10, eb: 20, want: 0, wallSmall: s, wallBig: 2 * s, wantLinear: 1},
		{name: "no more entries", small: 1, big: 2, es: 10, eb: 10, want: 0, wallSmall: s, wallBig: s, wantLinear: 1},
		{name: "fewer entries", small: 1, big: 2, es: 10, eb: 5, want: 0, wallSmall: 0, wallBig: s, wantLinear: 0},
	} {
		if got := PerEntry(tt.small, tt.big, tt.es, tt.eb); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s: PerEntry = %v, want %v", tt.name, got, tt.want)
		}
		if got := Linearity(tt.wallSmall, tt.wallBig, tt.es, tt.eb); math.Abs(got-tt.wantLinear) > 1e-9 {
			t.Errorf("%s: Linearity = %v, want %v", tt.name, got, tt.wantLinear)
		}
	}
}

func TestParseGCTrace(t *testing.T) {
	trace := `{"level":"info","msg":"pulling"}
gc 1 @0.004s 2%: 0.010+0.50+0.002 ms clock, 0.020+0.1/0.4/0+0.004 ms cpu, 3->4->1 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P
gc 2 @0.900s 1%: 0.010+3.1+0.002 ms clock, 0.020+0.1/2.4/0+0.004 ms cpu, 150->180->120 MB, 160 MB goal, 0 MB stacks, 0 MB globals, 2 P
not gc 3 @1s: 999->999->999 MB
gc 3 @1.500s 1%: 0.010+3.1+0.002 ms clock, 0.020+0.1/2.4/0+0.004 ms cpu, 200->210->90 MB, 240 MB goal, 0 MB stacks, 0 MB globals, 2 P (forced)
`
	peak, live := ParseGCTrace(trace)
	if peak != 210<<20 || live != 120<<20 {
		t.Fatalf("peak %d, live %d; want %d, %d", peak, live, 210<<20, 120<<20)
	}
	if p, l := ParseGCTrace("no trace here\n"); p != 0 || l != 0 {
		t.Fatalf("no trace: %d %d", p, l)
	}
}

func TestScaleTables(t *testing.T) {
	s := time.Second
	small := summarizeScale("small", 28_000, 800e6, []Run{
		{Wall: 6 * s, CPU: 8 * s, PeakRSS: 140 << 20, HeapPeak: 100 << 20, HeapLive: 60 << 20, ImageBytes: 1e9},
		{Wall: 5 * s, CPU: 7 * s, PeakRSS: 130 << 20, HeapPeak: 90 << 20, HeapLive: 50 << 20, ImageBytes: 1e9},
	})
	if small.Wall != 5500*time.Millisecond || small.PeakRSS != 135<<20 || small.HeapLive != 55<<20 {
		t.Fatalf("medians: %+v", small)
	}
	big := summarizeScale("big", 148_000, 4.3e9, []Run{
		{Wall: 24 * s, CPU: 30 * s, PeakRSS: 355 << 20, ImageBytes: 4.6e9},
		{Wall: 22 * s, CPU: 28 * s, PeakRSS: 335 << 20, ImageBytes: 4.6e9},
	})
	tab, slope := scaleTables([]ScaleResult{small, big})
	var b strings.Builder
	tab.Write(&b)
	slope.Write(&b)
	got := b.String()
	for _, want := range []string{
		"| small | 28000 | 800 | 1000 | 5.50 | 7.50 | 135 | 95 / 55 | 6.00 / 140, 5.00 / 130 |",
		"| big | 148000 | 4300 | 4600 | 23.00 | 29.00 | 345 | - / - |",
		// (345 - 135) MiB over 120,000 entries.
		"| peak RSS per added entry (bytes): (RSS_big - RSS_small) / (entries_big - entries_small) | 1835 |",
		// No trace for the big image: no slope.
		"| Go heap live per added entry (bytes, gctrace) | - |",
		// (23 / 148000) / (5.5 / 28000)
		"| wall time per entry, big / small (1.00: linear) | 0.79 |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("tables lack %q:\n%s", want, got)
		}
	}
	if _, s := scaleTables([]ScaleResult{small}); len(s.Rows) != 0 {
		t.Error("one image: no slopes")
	}
}

func TestLinkChunksTable(t *testing.T) {
	s := time.Second
	runs := []LinkChunksRun{
		{Chunks: true, AReady: 60 * s, ARecv: []int64{1e9, 1.1e9}, BBuilt: 10 * s, BArtifact: 1e9,
			BNodeReady: []time.Duration{12 * s, 13 * s, 14 * s}, BRecv: []int64{60e6, 70e6, 80e6}},
		{Chunks: false, AReady: 61 * s, ARecv: []int64{1e9}, BBuilt: 11 * s, BArtifact: 1e9,
			BNodeReady: []time.Duration{60 * s, 70 * s}, BRecv: []int64{1e9, 1e9}, Floor: 30 * s},
	}
	var b strings.Builder
	linkChunksTable(runs, 100).Write(&b)
	got := b.String()
	for _, want := range []string{
		"| measure | chunks on | chunks off |",
		"| B: the whole artifact over one 100 Mbit/s link (s) | 80.00 | 80.00 |",
		"| B: create -> node READY, median over nodes (s) | 13.00 | 65.00 |",
		"| B: create -> node READY, slowest node (s) | 14.00 | 70.00 |",
		"| B: BUILT -> READY on all 8 (s) | 4.00 | 59.00 |",
		"no network (s) | - | 30.00 |",
		"| B: MB received per node, median / max | 70.0 / 80.0 | 1000.0 / 1000.0 |",
		"| B: received / artifact, median node | 0.070 | 1.000 |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	if d := deltas([]int64{1, 2}, []int64{5, 9}); d[0] != 4 || d[1] != 7 {
		t.Errorf("deltas = %v", d)
	}
}
