package cubeview

import (
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// BuildItem is one job in a listing (GET /cube/template/jobs): the job's
// view with its image and times. This service's own, for the console.
type BuildItem struct {
	JobInfo
	SourceImageRef    string `json:"source_image_ref,omitempty"`
	SourceImageDigest string `json:"source_image_digest,omitempty"`
	CreatedAt         string `json:"created_at,omitempty"` // RFC 3339, UTC
	UpdatedAt         string `json:"updated_at,omitempty"`
}

// NewBuildItem is the listing view of a job.
func NewBuildItem(j *core.Job) BuildItem {
	return BuildItem{JobInfo: *NewJobInfo(j, nil), SourceImageRef: j.SourceImageRef, SourceImageDigest: j.SourceImageDigest,
		CreatedAt: rfc3339(j.CreatedAt), UpdatedAt: rfc3339(j.UpdatedAt)}
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// BuildList is GET /cube/template/jobs beside the envelope.
type BuildList struct {
	Data []BuildItem `json:"data"`
}

// JobLogLine is one line a service logged about a job.
type JobLogLine struct {
	Seq     int64  `json:"seq"`
	Time    string `json:"time"`
	Level   string `json:"level"`
	Source  string `json:"source,omitempty"`
	Message string `json:"message"`
}

// JobLog is GET /cube/template/jobs/log beside the envelope: the job's
// newest lines, oldest first.
type JobLog struct {
	JobID string       `json:"job_id"`
	Lines []JobLogLine `json:"lines"`
}

// NewJobLog is the view of a job's lines.
func NewJobLog(jobID string, ls []ports.JobLogLine) JobLog {
	out := JobLog{JobID: jobID, Lines: make([]JobLogLine, 0, len(ls))}
	for _, l := range ls {
		out.Lines = append(out.Lines, JobLogLine{Seq: l.Seq, Time: rfc3339(l.Time), Level: l.Level, Source: l.Source, Message: l.Message})
	}
	return out
}

// NodeInfo is one node as GET /cube/node shows it: its health from the
// master's last probe, and the READY template copies it holds with their
// rootfs bytes.
type NodeInfo struct {
	NodeID       string `json:"node_id"`
	NodeIP       string `json:"node_ip,omitempty"`
	InstanceType string `json:"instance_type,omitempty"`
	Healthy      bool   `json:"healthy"`
	// LastProbe is when this master last probed it; LastSeen when a probe
	// last succeeded (RFC 3339, UTC; empty before the first).
	LastProbe     string `json:"last_probe,omitempty"`
	LastSeen      string `json:"last_seen,omitempty"`
	LastError     string `json:"last_error,omitempty"`
	TemplatesHeld int    `json:"templates_held"`
	BytesUsed     int64  `json:"bytes_used"`
}

// NodeList is GET /cube/node beside the envelope.
type NodeList struct {
	Data []NodeInfo `json:"data"`
}

// RFC3339 formats t for a view ("" for the zero time).
func RFC3339(t time.Time) string { return rfc3339(t) }
