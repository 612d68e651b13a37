package joblog

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cubesandbox/templatecenter/ports"
)

const (
	queueSize  = 4096
	batchSize  = 200
	flushEvery = 250 * time.Millisecond
	// writeTimeout bounds one batch's write; a batch that fails is
	// dropped (the process's own log still has its lines).
	writeTimeout = 10 * time.Second
)

// JobKeys are the attribute keys that name a job in the services' logs.
var JobKeys = []string{"job", "job_id"}

// Recorder queues job lines and writes them to a ports.JobLog.
type Recorder struct {
	log     ports.JobLog
	source  string
	onError func(error)

	queue   chan ports.JobLogLine
	stop    chan struct{}
	flush   chan chan struct{}
	done    chan struct{}
	once    sync.Once
	dropped atomic.Int64
}

// NewRecorder starts the writer. source names the service in every line;
// onError (optional) hears about a batch that could not be written.
func NewRecorder(l ports.JobLog, source string, onError func(error)) *Recorder {
	r := &Recorder{log: l, source: source, onError: onError, queue: make(chan ports.JobLogLine, queueSize),
		stop: make(chan struct{}), flush: make(chan chan struct{}), done: make(chan struct{})}
	go r.run()
	return r
}

// Dropped is how many lines a full queue or a failed write lost.
func (r *Recorder) Dropped() int64 { return r.dropped.Load() }

// Close writes what is queued and stops the writer. Lines logged after
// Close are dropped.
func (r *Recorder) Close() {
	r.once.Do(func() { close(r.stop) })
	<-r.done
}

// Flush returns once every line queued before the call is written (or
// dropped): for tests and shutdown paths.
func (r *Recorder) Flush() {
	reply := make(chan struct{})
	select {
	case r.flush <- reply:
		<-reply
	case <-r.done:
	}
}

func (r *Recorder) enqueue(l ports.JobLogLine) {
	select {
	case <-r.stop:
		r.dropped.Add(1)
		return
	default:
	}
	select {
	case r.queue <- l:
	default:
		r.dropped.Add(1)
	}
}

func (r *Recorder) run() {
	defer close(r.done)
	tick := time.NewTicker(flushEvery)
	defer tick.Stop()
	var batch []ports.JobLogLine
	write := func() {
		if len(batch) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		err := r.log.Append(ctx, batch)
		cancel()
		if err != nil {
			r.dropped.Add(int64(len(batch)))
			if r.onError != nil {
				r.onError(fmt.Errorf("job log: %d lines not written: %w", len(batch), err))
			}
		}
		batch = batch[:0]
	}
	// drain writes everything queued now.
	drain := func() {
		for {
			select {
			case l := <-r.queue:
				batch = append(batch, l)
				if len(batch) >= batchSize {
					write()
				}
			default:
				write()
				return
			}
		}
	}
	for {
		select {
		case l := <-r.queue:
			batch = append(batch, l)
			if len(batch) >= batchSize {
				write()
			}
		case <-tick.C:
			write()
		case reply := <-r.flush:
			drain()
			close(reply)
		case <-r.stop:
			drain()
			return
		}
	}
}

// Handler wraps next: every record goes to next as before, and a record
// naming a job at INFO or above is queued for the job log too.
func (r *Recorder) Handler(next slog.Handler) slog.Handler {
	return &handler{next: next, r: r}
}

// Logger is log with its handler wrapped by Handler.
func (r *Recorder) Logger(log *slog.Logger) *slog.Logger {
	return slog.New(r.Handler(log.Handler()))
}

type handler struct {
	next   slog.Handler
	r      *Recorder
	job    string // named by WithAttrs
	text   string // WithAttrs' attributes as text
	groups string // WithGroup's prefix ("g.")
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.next.Enabled(ctx, l)
}

func (h *handler) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Level >= slog.LevelInfo {
		job := h.job
		var b strings.Builder
		b.WriteString(rec.Message)
		b.WriteString(h.text)
		rec.Attrs(func(a slog.Attr) bool {
			if h.groups == "" && job == "" && isJobKey(a.Key) {
				job = a.Value.Resolve().String()
			}
			writeAttr(&b, h.groups, a)
			return true
		})
		if job != "" {
			t := rec.Time
			if t.IsZero() {
				t = time.Now()
			}
			h.r.enqueue(ports.JobLogLine{JobID: job, Time: t, Level: rec.Level.String(), Source: h.r.source, Message: b.String()})
		}
	}
	if h.next.Enabled(ctx, rec.Level) {
		return h.next.Handle(ctx, rec)
	}
	return nil
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.next = h.next.WithAttrs(attrs)
	var b strings.Builder
	b.WriteString(h.text)
	for _, a := range attrs {
		if h.groups == "" && c.job == "" && isJobKey(a.Key) {
			c.job = a.Value.Resolve().String()
		}
		writeAttr(&b, h.groups, a)
	}
	c.text = b.String()
	return &c
}

func (h *handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.next = h.next.WithGroup(name)
	c.groups = h.groups + name + "."
	return &c
}

func isJobKey(k string) bool {
	for _, j := range JobKeys {
		if k == j {
			return true
		}
	}
	return false
}

// writeAttr writes " key=value", quoting a value that needs it, groups
// flattened into dotted keys.
func writeAttr(b *strings.Builder, prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, g := range v.Group() {
			writeAttr(b, p, g)
		}
		return
	}
	if a.Key == "" {
		return
	}
	s := v.String()
	if s == "" || strings.ContainsAny(s, " \t\n\"=") {
		s = strconv.Quote(s)
	}
	b.WriteString(" ")
	b.WriteString(prefix)
	b.WriteString(a.Key)
	b.WriteString("=")
	b.WriteString(s)
}
