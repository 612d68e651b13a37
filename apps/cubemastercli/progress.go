package main

import (
	"fmt"
	"io"
	"os"
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

// display shows a job's progress. On a terminal it keeps a live region of
// two lines, rewritten in place: the job with a pull bar (bytes, layers,
// speed) and a distribution bar (nodes ready of expected). Each line is
// cut to the terminal's width, so nothing wraps into duplicates. When a
// phase ends a line saying how long it took is printed above the region.
// Elsewhere (a pipe, a file) it prints a plain line per change.
type display struct {
	w       io.Writer
	tty     bool
	width   func() int
	now     func() time.Time
	drawn   int // live lines on screen
	phase   string
	since   time.Time
	lastKey string
}

func newDisplay(w io.Writer, tty bool) *display {
	return &display{w: w, tty: tty, width: func() int { return terminalWidth(w) }, now: time.Now}
}

// show renders a new state of the job.
func (d *display) show(j *cubeview.JobInfo) {
	now := d.now()
	if j.Phase != d.phase {
		if d.phase != "" {
			d.finished(fmt.Sprintf("done %-16s %6.1fs", d.phase, now.Sub(d.since).Seconds()))
		}
		d.phase, d.since = j.Phase, now
	}
	if !d.tty {
		line := plainLine(j)
		if line != d.lastKey {
			fmt.Fprintln(d.w, line)
			d.lastKey = line
		}
		return
	}
	d.clear()
	w := d.width()
	lines := []string{fit(pullLine(j, w), w), fit(distributionLine(j, w), w)}
	fmt.Fprint(d.w, strings.Join(lines, "\n"))
	d.drawn = len(lines)
}

// end prints the last phase's line (when the job ended in it) and leaves
// the live region on screen.
func (d *display) end(j *cubeview.JobInfo) {
	if d.tty && d.drawn > 0 {
		fmt.Fprintln(d.w)
		d.drawn = 0
	}
	if d.phase != "" && (j.Status == statusReady || j.Status == statusFailed) {
		verb := "done"
		if j.Status == statusFailed {
			verb = "FAILED in"
		}
		fmt.Fprintf(d.w, "%s %-16s %6.1fs\n", verb, dash(d.phase), d.now().Sub(d.since).Seconds())
		d.phase = ""
	}
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

// bar is a progress bar of width cells for done of total.
func bar(done, total int64, width int) string {
	if width < 3 {
		return ""
	}
	fill := 0
	if total > 0 {
		fill = int(min(done, total) * int64(width) / total)
	}
	return "[" + strings.Repeat("#", fill) + strings.Repeat("-", width-fill) + "]"
}

// barWidthFor leaves room for text in a line of width columns.
func barWidthFor(width, text int) int {
	return min(max(width-text-2, 0), 40)
}

func pullLine(j *cubeview.JobInfo, width int) string {
	p := min(max(j.Progress, 0), 100)
	head := fmt.Sprintf("%-7s %-13s %3d%%", j.Status, dash(j.Phase), p)
	tail := ""
	if j.PullTotalBytes > 0 || j.PullTotalLayers > 0 {
		pct := int64(0)
		if j.PullTotalBytes > 0 {
			pct = 100 * min(j.PullDownloadedBytes, j.PullTotalBytes) / j.PullTotalBytes
		}
		tail = fmt.Sprintf(" pull %d%% %s/%s layers %d/%d", pct, humanBytes(j.PullDownloadedBytes), humanBytes(j.PullTotalBytes),
			j.PullCompletedLayers, j.PullTotalLayers)
		if j.PullSpeedBPS > 0 {
			tail += " " + humanBytes(j.PullSpeedBPS) + "/s"
		}
	}
	bw := barWidthFor(width, len(head)+len(tail))
	done, total := j.PullDownloadedBytes, j.PullTotalBytes
	if total == 0 {
		done, total = int64(p), 100
	}
	return head + " " + bar(done, total, bw) + tail
}

func distributionLine(j *cubeview.JobInfo, width int) string {
	head := "        nodes"
	tail := fmt.Sprintf(" %d/%d ready, %d failed", j.ReadyNodeCount, j.ExpectedNodeCount, j.FailedNodeCount)
	if j.ExpectedNodeCount == 0 {
		tail = " waiting for the build"
	}
	return head + " " + bar(int64(j.ReadyNodeCount+j.FailedNodeCount), int64(j.ExpectedNodeCount), barWidthFor(width, len(head)+len(tail))) + tail
}

// plainLine is the non-terminal view: one line, no bars.
func plainLine(j *cubeview.JobInfo) string {
	p := min(max(j.Progress, 0), 100)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %d%%", j.Status, dash(j.Phase), p)
	if j.PullTotalBytes > 0 {
		fmt.Fprintf(&b, " pull %s/%s layers %d/%d", humanBytes(j.PullDownloadedBytes), humanBytes(j.PullTotalBytes), j.PullCompletedLayers, j.PullTotalLayers)
	}
	fmt.Fprintf(&b, " nodes %d/%d ready, %d failed", j.ReadyNodeCount, j.ExpectedNodeCount, j.FailedNodeCount)
	return b.String()
}

// fit cuts s to width-1 columns (the last column would wrap on some
// terminals). The lines are ASCII.
func fit(s string, width int) string {
	if width > 1 && len(s) > width-1 {
		return s[:width-1]
	}
	return s
}
