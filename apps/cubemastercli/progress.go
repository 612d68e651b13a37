package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/cubeview"
)

// terminalWidth is the width of the terminal w writes to, else 80; tests
// replace it.
var terminalWidth = func(w io.Writer) int {
	if f, ok := w.(*os.File); ok {
		if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 0 {
			return int(ws.Col)
		}
	}
	return 80
}

// wideFrom is the terminal width from which the long layout is used.
const wideFrom = 120

// phaseOrder lists the phases in the order a job goes through them, so
// the phases that ended between two polls are printed in order.
var phaseOrder = []string{"PULLING", "UNPACKING", "BUILDING_EXT4", "GENERATING_JSON", "UPLOADING", "MIGRATING",
	"DISTRIBUTING", "CREATING_TEMPLATE", "SNAPSHOTTING", "REGISTERING"}

// display shows a job's progress. On a terminal it keeps a live region of
// two lines, rewritten in place: the job with a progress bar (pulled bytes,
// layers, speed while pulling) and the nodes (ready of expected, the ones
// it still waits for, the ones that failed). Each line is laid out to fit
// the terminal: what does not fit is left out whole, never cut mid-word,
// and a wide terminal gets the long layout. A line is printed above the
// region for each finished phase, with the time the phase took where its
// work ran (the job's phase_durations_ms; the time seen between polls,
// marked "~", from a master that does not send them). Elsewhere (a pipe,
// a file) it prints a plain line per change. The percentage shown never
// goes back.
type display struct {
	w       io.Writer
	tty     bool
	width   func() int
	now     func() time.Time
	drawn   int // live lines on screen
	phase   string
	since   time.Time
	printed map[string]bool // phases whose "done" line is out
	pct     int             // the highest percentage shown
	lastKey string
}

func newDisplay(w io.Writer, tty bool) *display {
	return &display{w: w, tty: tty, width: func() int { return terminalWidth(w) }, now: time.Now, printed: map[string]bool{}}
}

// shownPct is the job's percentage, never below one shown before.
func (d *display) shownPct(j *cubeview.JobInfo) int {
	d.pct = max(d.pct, min(max(j.Progress, 0), 100))
	return d.pct
}

// show renders a new state of the job.
func (d *display) show(j *cubeview.JobInfo) {
	now := d.now()
	if j.Phase != d.phase {
		d.phasesDone(j, j.Phase, now)
		d.phase, d.since = j.Phase, now
	}
	pct := d.shownPct(j)
	if !d.tty {
		line := plainLine(j, pct)
		if line != d.lastKey {
			fmt.Fprintln(d.w, line)
			d.lastKey = line
		}
		return
	}
	d.clear()
	w := d.width()
	lines := []string{statusLine(j, pct, now.Sub(d.since), w), nodesLine(j, w)}
	fmt.Fprint(d.w, strings.Join(lines, "\n"))
	d.drawn = len(lines)
}

// phasesDone prints a line for every phase that ended before current: in
// order, with the duration the job reports (measured where the work ran),
// else the time this watcher saw the phase, marked "~".
func (d *display) phasesDone(j *cubeview.JobInfo, current string, now time.Time) {
	for _, ph := range phaseOrder {
		if ph == current {
			break
		}
		if d.printed[ph] {
			continue
		}
		if ms, ok := j.PhaseDurationsMS[ph]; ok {
			d.printed[ph] = true
			d.finished(fmt.Sprintf("done %-17s %7s", ph, seconds(time.Duration(ms)*time.Millisecond)))
		} else if ph == d.phase && len(j.PhaseDurationsMS) == 0 {
			d.printed[ph] = true
			d.finished(fmt.Sprintf("done %-17s %7s", ph, "~"+seconds(now.Sub(d.since))))
		}
	}
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

// end prints the lines of the phases that ended with the job and leaves
// the live region on screen.
func (d *display) end(j *cubeview.JobInfo) {
	if d.tty && d.drawn > 0 {
		fmt.Fprintln(d.w)
		d.drawn = 0
	}
	if j.Status != statusReady && j.Status != statusFailed {
		return
	}
	now := d.now()
	if j.Status == statusReady {
		d.phasesDone(j, "", now)
		return
	}
	d.phasesDone(j, j.Phase, now)
	took := "~" + seconds(now.Sub(d.since))
	if ms, ok := j.PhaseDurationsMS[j.Phase]; ok {
		took = seconds(time.Duration(ms) * time.Millisecond)
	}
	fmt.Fprintf(d.w, "FAILED in %-12s %7s\n", dash(j.Phase), took)
}

// interrupt leaves the live region before an error message.
func (d *display) interrupt() {
	if d.tty && d.drawn > 0 {
		fmt.Fprintln(d.w)
		d.drawn = 0
	}
}

// finished prints a line above the live region.
func (d *display) finished(line string) {
	if d.tty {
		d.clear()
		d.drawn = 0
	}
	fmt.Fprintln(d.w, line)
}

// clear erases the live region and puts the cursor at its start.
func (d *display) clear() {
	if d.drawn == 0 {
		return
	}
	fmt.Fprint(d.w, "\r\033[K")
	for i := 1; i < d.drawn; i++ {
		fmt.Fprint(d.w, "\033[1A\r\033[K")
	}
	d.drawn = 0
}

// bar is a progress bar of width cells (brackets included) for done of
// total.
func bar(done, total int64, width int) string {
	if width < 3 {
		return ""
	}
	inner := width - 2
	fill := 0
	if total > 0 {
		fill = int(min(max(done, 0), total) * int64(inner) / total)
	}
	return "[" + strings.Repeat("#", fill) + strings.Repeat("-", inner-fill) + "]"
}

// layout joins head, a bar and the parts that fit in width-1 columns (the
// last column would wrap on some terminals). Parts are given most
// important first and dropped from the end, whole, until the line fits
// with a bar of at least minBar cells (at most maxBar); a line with no
// room for a bar goes without one. With barLast, the bar goes before any
// part does. The head itself is cut only at a space.
func layout(width int, head string, done, total int64, barLast bool, sep string, parts ...string) string {
	const minBar, maxBar = 12, 42
	room := width - 1
	join := func(n int) string { return strings.Join(parts[:n], sep) }
	if barLast && len(head)+1+len(join(len(parts))) > room-1-minBar {
		total = 0
	}
	for n := len(parts); n >= 0 && total > 0; n-- {
		text := head + " " + join(n)
		if free := room - len(text) - 1; free >= minBar {
			line := head + " " + bar(done, total, min(free, maxBar))
			if n > 0 {
				line += " " + join(n)
			}
			return line
		}
	}
	// No room for a bar (or nothing to measure): as many parts as fit.
	line, n := head, 0
	for ; n < len(parts); n++ {
		if len(head)+1+len(join(n+1)) > room {
			break
		}
	}
	if n > 0 {
		line += " " + join(n)
	}
	for len(line) > room {
		i := strings.LastIndexByte(line[:room], ' ')
		if i <= 0 {
			return line[:max(room, 0)]
		}
		line = line[:i]
	}
	return line
}

// statusLine is the job's line: status, phase, percentage and a bar; while
// pulling, the bytes, layers and speed; the time spent in the phase.
func statusLine(j *cubeview.JobInfo, pct int, inPhase time.Duration, width int) string {
	wide := width >= wideFrom
	status := j.Status
	if status == "RUNNING" && !wide {
		status = ""
	}
	head := strings.TrimSpace(fmt.Sprintf("%s %s %3d%%", status, dash(j.Phase), pct))
	done, total := int64(pct), int64(100)
	var parts []string
	if pulling := j.PullTotalBytes > 0 && (j.Phase == "PULLING" || j.PullDownloadedBytes < j.PullTotalBytes); pulling {
		done, total = j.PullDownloadedBytes, j.PullTotalBytes
		if wide {
			parts = append(parts, fmt.Sprintf("pulled %s of %s", humanBytes(j.PullDownloadedBytes), humanBytes(j.PullTotalBytes)),
				fmt.Sprintf("layers %d/%d", j.PullCompletedLayers, j.PullTotalLayers))
		} else {
			parts = append(parts, humanBytes(j.PullDownloadedBytes)+"/"+humanBytes(j.PullTotalBytes),
				fmt.Sprintf("%d/%d layers", j.PullCompletedLayers, j.PullTotalLayers))
		}
		if j.PullSpeedBPS > 0 {
			parts = append(parts, humanBytes(j.PullSpeedBPS)+"/s")
		}
	}
	if inPhase > 0 && j.Status != statusReady && j.Status != statusFailed {
		parts = append(parts, fmt.Sprintf("%ds", int(inPhase.Seconds())))
	}
	return layout(width, head, done, total, false, " ", parts...)
}

// nodesLine is the nodes' line: ready of expected, then the nodes the job
// still waits for by name, then those that failed (a node that was down
// says so).
func nodesLine(j *cubeview.JobInfo, width int) string {
	wide := width >= wideFrom
	head := "nodes"
	if j.ExpectedNodeCount == 0 {
		return layout(width, head+": waiting for the build", 0, 0, true, "")
	}
	var parts []string
	if wide {
		parts = append(parts, fmt.Sprintf("%d/%d ready, %d failed", j.ReadyNodeCount, j.ExpectedNodeCount, j.FailedNodeCount))
	} else {
		parts = append(parts, fmt.Sprintf("%d/%d ready", j.ReadyNodeCount, j.ExpectedNodeCount))
		if j.FailedNodeCount > 0 {
			parts = append(parts, fmt.Sprintf("%d failed", j.FailedNodeCount))
		}
	}
	waiting, failed := nodeNames(j)
	if len(waiting) > 0 {
		parts = append(parts, "waiting for "+strings.Join(waiting, ","))
	}
	if len(failed) > 0 {
		parts = append(parts, "failed: "+strings.Join(failed, ","))
	}
	return layout(width, head, int64(j.ReadyNodeCount+j.FailedNodeCount), int64(j.ExpectedNodeCount), true, ", ", parts...)
}

// nodeNames are the nodes the job's current phase still waits for (a copy
// while DISTRIBUTING, a snapshot while SNAPSHOTTING) and those that failed
// (a node that was not healthy marked "(down)").
func nodeNames(j *cubeview.JobInfo) (waiting, failed []string) {
	var busy []string
	switch {
	case j.Status == statusReady || j.Status == statusFailed:
	case j.Phase == "DISTRIBUTING":
		busy = []string{"DISTRIBUTING"}
	case j.Phase == "SNAPSHOTTING":
		busy = []string{"DISTRIBUTED", "SNAPSHOTTING"}
	}
	for _, n := range j.Nodes {
		switch {
		case n.Status == statusFailed:
			name := n.NodeID
			if strings.Contains(n.Error, "not healthy") || strings.Contains(n.Error, "stopped answering") {
				name += " (down)"
			}
			failed = append(failed, name)
		case slices.Contains(busy, n.Status):
			waiting = append(waiting, n.NodeID)
		}
	}
	return waiting, failed
}

// plainLine is the non-terminal view: one line per change, no bar, not
// cut.
func plainLine(j *cubeview.JobInfo, pct int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %d%%", j.Status, dash(j.Phase), pct)
	if j.PullTotalBytes > 0 && (j.Phase == "PULLING" || j.PullDownloadedBytes < j.PullTotalBytes) {
		fmt.Fprintf(&b, " pull %s/%s layers %d/%d", humanBytes(j.PullDownloadedBytes), humanBytes(j.PullTotalBytes), j.PullCompletedLayers, j.PullTotalLayers)
	}
	if j.ExpectedNodeCount == 0 && j.Status != statusReady && j.Status != statusFailed {
		return b.String()
	}
	fmt.Fprintf(&b, " nodes %d/%d ready, %d failed", j.ReadyNodeCount, j.ExpectedNodeCount, j.FailedNodeCount)
	waiting, failed := nodeNames(j)
	if len(waiting) > 0 {
		fmt.Fprintf(&b, ", waiting for %s", strings.Join(waiting, ","))
	}
	if len(failed) > 0 {
		fmt.Fprintf(&b, ", failed: %s", strings.Join(failed, ","))
	}
	return b.String()
}
