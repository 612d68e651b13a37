package bench

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"
)

// Median returns the median of ds (the mean of the middle two for an even
// count), 0 for none.
func Median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Percentile returns the p-th percentile (0..100) of ds by the nearest-rank
// method.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(p/100*float64(len(s))+0.999999) - 1
	return s[min(max(rank, 0), len(s)-1)]
}

// Ratio is how many times longer num is than den (num/den).
func Ratio(num, den time.Duration) float64 {
	if den <= 0 {
		return 0
	}
	return num.Seconds() / den.Seconds()
}

// Summary is the per-pipeline aggregate of a set of runs.
type Summary struct {
	Pipeline   string
	Runs       []Run
	Median     time.Duration
	Fastest    time.Duration // the shortest run: the least disturbed by the machine
	PeakRSS    int64         // largest over the runs
	CPU        time.Duration // median
	ImageBytes int64
	Phases     map[string]int64 // median per phase, milliseconds
}

// Summarize groups runs by pipeline, in the order pipelines first appear.
func Summarize(runs []Run) []Summary {
	var order []string
	by := map[string][]Run{}
	for _, r := range runs {
		if _, ok := by[r.Pipeline]; !ok {
			order = append(order, r.Pipeline)
		}
		by[r.Pipeline] = append(by[r.Pipeline], r)
	}
	var out []Summary
	for _, name := range order {
		rs := by[name]
		s := Summary{Pipeline: name, Runs: rs, Phases: map[string]int64{}}
		var walls, cpus []time.Duration
		phases := map[string][]time.Duration{}
		for _, r := range rs {
			walls = append(walls, r.Wall)
			cpus = append(cpus, r.CPU)
			s.PeakRSS = max(s.PeakRSS, r.PeakRSS)
			s.ImageBytes = max(s.ImageBytes, r.ImageBytes)
			for k, v := range r.Phases {
				phases[k] = append(phases[k], time.Duration(v)*time.Millisecond)
			}
		}
		s.Median, s.CPU = Median(walls), Median(cpus)
		s.Fastest = slices.Min(walls)
		for k, v := range phases {
			s.Phases[k] = Median(v).Milliseconds()
		}
		out = append(out, s)
	}
	return out
}

// Machine describes where the numbers were taken.
func Machine() string {
	var b strings.Builder
	cpu := "unknown CPU"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := ""
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		line, _, _ := strings.Cut(string(data), "\n")
		mem = strings.Join(strings.Fields(line)[1:], " ")
	}
	kernel, _ := runOut("uname", "-r")
	e2fs, _ := runOut("mke2fs", "-V")
	e2fs, _, _ = strings.Cut(e2fs, "\n")
	fmt.Fprintf(&b, "%d CPUs (%s), %s RAM, Linux %s, %s, %s", runtime.NumCPU(), cpu, mem,
		strings.TrimSpace(kernel), runtime.Version(), strings.TrimSpace(e2fs))
	return b.String()
}

// Load is the load averages line of /proc/loadavg.
func Load() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func runOut(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

// Table is a markdown table.
type Table struct {
	Header []string
	Rows   [][]string
}

// Write prints t as markdown.
func (t Table) Write(w io.Writer) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(t.Header, " | "))
	seps := make([]string, len(t.Header))
	for i := range seps {
		seps[i] = "---"
	}
	fmt.Fprintf(w, "|%s|\n", strings.Join(seps, "|"))
	for _, r := range t.Rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
	}
}

// MiB formats bytes as MiB.
func MiB(n int64) string {
	if n <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", float64(n)/(1<<20))
}

// Secs formats a duration in seconds.
func Secs(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%.3f", d.Seconds())
	}
	return fmt.Sprintf("%.2f", d.Seconds())
}

// PhaseString renders ours' phases compactly.
func PhaseString(p map[string]int64) string {
	if len(p) == 0 {
		return ""
	}
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(p[k])/1000))
	}
	return strings.Join(parts, ", ")
}
