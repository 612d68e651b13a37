package wire

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/envelope"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// StatusReport is the body of POST /internal/template/jobs/{job_id}/status.
// Only these fields are read; anything else in a received body is dropped.
// The first group updates the job row (upstream's whitelist); the second is
// the artifact metadata that comes with a BUILT report (upstream §9 step 9).
// The third: the presigned artifact_url, only sent, for an upstream master
// (this one mints download URLs when a node asks), and the CubeEgress CA
// fields every BUILT report carries, recorded on the artifact row.
type StatusReport struct {
	Status                  string  `json:"status,omitempty"`
	Phase                   string  `json:"phase,omitempty"`
	Progress                *int64  `json:"progress,omitempty"`
	ErrorMessage            *string `json:"error_message,omitempty"`
	ArtifactID              string  `json:"artifact_id,omitempty"`
	ArtifactStatus          string  `json:"artifact_status,omitempty"`
	SourceImageDigest       string  `json:"source_image_digest,omitempty"`
	TemplateSpecFingerprint string  `json:"template_spec_fingerprint,omitempty"`
	PullTotalBytes          *int64  `json:"pull_total_bytes,omitempty"`
	PullDownloadedBytes     *int64  `json:"pull_downloaded_bytes,omitempty"`
	PullTotalLayers         *int64  `json:"pull_total_layers,omitempty"`
	PullCompletedLayers     *int64  `json:"pull_completed_layers,omitempty"`
	PullSpeedBPS            *int64  `json:"pull_speed_bps,omitempty"`
	// PhaseDurationsMS is how long each finished build phase took on the
	// data plane, in milliseconds by phase (this service's own field).
	PhaseDurationsMS map[string]int64 `json:"phase_durations_ms,omitempty"`

	SourceImageRef    string `json:"source_image_ref,omitempty"`
	Ext4Path          string `json:"ext4_path,omitempty"`
	Ext4SHA256        string `json:"ext4_sha256,omitempty"`
	Ext4SizeBytes     *int64 `json:"ext4_size_bytes,omitempty"`
	ImageConfigJSON   string `json:"image_config_json,omitempty"`
	WritableLayerSize string `json:"writable_layer_size,omitempty"`
	// MasterNodeIP is the download base URL (upstream's column name).
	MasterNodeIP   string `json:"master_node_ip,omitempty"`
	StorageBackend string `json:"storage_backend,omitempty"`
	ObjectKey      string `json:"object_key,omitempty"`

	// Inputs is what the build's fingerprint was computed from beyond the
	// job's request (BUILT only): the master recomputes the fingerprint
	// from the job's own request with them.
	Inputs *SpecInputs `json:"template_spec_inputs,omitempty"`

	ArtifactURL                string  `json:"artifact_url,omitempty"`
	CubeEgressCABaked          *bool   `json:"cube_egress_ca_baked,omitempty"`
	CubeEgressCAFingerprint    *string `json:"cube_egress_ca_fingerprint,omitempty"`
	CubeEgressCATargetsWritten *int64  `json:"cube_egress_ca_targets_written,omitempty"`
}

// SpecInputs is core.BuildInputs on the wire, named as the fingerprint's
// own fields are.
type SpecInputs struct {
	SourceImageDigest string `json:"source_image_digest"`
	CAFingerprint     string `json:"cube_egress_ca_fingerprint,omitempty"`
	EnvdSHA256        string `json:"envd_binary_sha256,omitempty"`
	BuilderFormat     string `json:"builder_format_version,omitempty"`
	Builder           string `json:"builder,omitempty"`
}

// EndsBuild reports whether the report ends the data plane's part of the
// job (BUILT, FAILED, READY); the reporter retries those harder. It is not
// core.JobStatus.Terminal: a BUILT job goes on at the master.
func (s *StatusReport) EndsBuild() bool {
	switch core.JobStatus(s.Status) {
	case core.JobBuilt, core.JobFailed, core.JobReady:
		return true
	}
	return false
}

// EncodeStatusReport converts a port report to its wire body. Update fields
// the data plane has no business sending (template status, node counts,
// result_json) are not carried.
func EncodeStatusReport(r ports.StatusReport) StatusReport {
	u := r.Update
	s := StatusReport{
		Status:                  string(u.Status),
		Phase:                   string(u.Phase),
		ErrorMessage:            u.ErrorMessage,
		ArtifactID:              u.ArtifactID,
		ArtifactStatus:          u.ArtifactStatus,
		SourceImageDigest:       u.SourceImageDigest,
		TemplateSpecFingerprint: u.Fingerprint,
	}
	if u.Progress != nil {
		s.Progress = i64(int64(*u.Progress))
	}
	if p := u.Pull; p != nil {
		s.PullTotalBytes = i64(p.TotalBytes)
		s.PullDownloadedBytes = i64(p.DownloadedBytes)
		s.PullTotalLayers = i64(int64(p.TotalLayers))
		s.PullCompletedLayers = i64(int64(p.CompletedLayers))
		s.PullSpeedBPS = i64(p.SpeedBPS)
	}
	if len(u.PhaseDurations) > 0 {
		s.PhaseDurationsMS = make(map[string]int64, len(u.PhaseDurations))
		for ph, d := range u.PhaseDurations {
			s.PhaseDurationsMS[string(ph)] = d.Milliseconds()
		}
	}
	if a := r.Artifact; a != nil {
		s.ArtifactID = firstNonEmpty(s.ArtifactID, a.ArtifactID)
		s.TemplateSpecFingerprint = firstNonEmpty(s.TemplateSpecFingerprint, a.Fingerprint)
		s.SourceImageDigest = firstNonEmpty(s.SourceImageDigest, a.SourceImageDigest)
		s.ArtifactStatus = firstNonEmpty(s.ArtifactStatus, string(a.Status))
		s.SourceImageRef = a.SourceImageRef
		s.Ext4Path = a.Ext4Path
		s.Ext4SHA256 = a.Ext4SHA256
		if a.Ext4SizeBytes > 0 {
			s.Ext4SizeBytes = i64(a.Ext4SizeBytes)
		}
		s.ImageConfigJSON = a.ImageConfigJSON
		s.WritableLayerSize = a.WritableLayerSize
		s.MasterNodeIP = a.DownloadBaseURL
		s.StorageBackend = a.StorageBackend
		s.ObjectKey = a.ObjectKey
		if in := r.Inputs; in != nil {
			s.Inputs = &SpecInputs{SourceImageDigest: in.SourceImageDigest, CAFingerprint: in.CAFingerprint,
				EnvdSHA256: in.EnvdSHA256, BuilderFormat: in.BuilderFormat, Builder: in.Builder}
		}
		// Upstream's BUILT report always names the CA bake, baked or not.
		baked, fp, written := a.CubeEgressCABaked, a.CubeEgressCAFingerprint, a.CubeEgressCATargetsWritten
		s.CubeEgressCABaked, s.CubeEgressCAFingerprint, s.CubeEgressCATargetsWritten = &baked, &fp, &written
	}
	return s
}

// DecodeStatusReport reads a callback body (the caller caps its size) and
// converts it to a port report. Unknown fields are ignored; integers may be
// sent as JSON floats (upstream decoders do) and are truncated to int64;
// statuses and phases are validated. With a BUILT status the artifact
// metadata comes back as Artifact and the sanitized body as
// Update.ResultJSON. Errors wrap core.ErrInvalidArgument and name the field.
func DecodeStatusReport(r io.Reader) (ports.StatusReport, error) {
	var raw map[string]json.RawMessage
	if err := envelope.DecodeReader(r, &raw); err != nil {
		return ports.StatusReport{}, err
	}
	if raw == nil {
		return ports.StatusReport{}, &core.FieldError{Field: "body", Reason: "must be a JSON object"}
	}
	d := fields{raw: raw}
	s := StatusReport{
		Status:                     d.str("status"),
		Phase:                      d.str("phase"),
		Progress:                   d.int("progress"),
		ErrorMessage:               d.strPtr("error_message"),
		ArtifactID:                 d.str("artifact_id"),
		ArtifactStatus:             d.str("artifact_status"),
		SourceImageDigest:          d.str("source_image_digest"),
		TemplateSpecFingerprint:    d.str("template_spec_fingerprint"),
		PullTotalBytes:             d.int("pull_total_bytes"),
		PullDownloadedBytes:        d.int("pull_downloaded_bytes"),
		PullTotalLayers:            d.int("pull_total_layers"),
		PullCompletedLayers:        d.int("pull_completed_layers"),
		PullSpeedBPS:               d.int("pull_speed_bps"),
		SourceImageRef:             d.str("source_image_ref"),
		Ext4Path:                   d.str("ext4_path"),
		Ext4SHA256:                 strings.ToLower(d.str("ext4_sha256")),
		Ext4SizeBytes:              d.int("ext4_size_bytes"),
		ImageConfigJSON:            d.str("image_config_json"),
		WritableLayerSize:          d.str("writable_layer_size"),
		MasterNodeIP:               d.str("master_node_ip"),
		StorageBackend:             d.str("storage_backend"),
		ObjectKey:                  d.str("object_key"),
		PhaseDurationsMS:           d.durations("phase_durations_ms"),
		Inputs:                     d.inputs("template_spec_inputs"),
		CubeEgressCABaked:          d.bool("cube_egress_ca_baked"),
		CubeEgressCAFingerprint:    d.strPtr("cube_egress_ca_fingerprint"),
		CubeEgressCATargetsWritten: d.int("cube_egress_ca_targets_written"),
	}
	if d.err != nil {
		return ports.StatusReport{}, d.err
	}
	return s.Port()
}

// Port validates the wire body and converts it to a port report.
func (s StatusReport) Port() (ports.StatusReport, error) {
	var status core.JobStatus
	if s.Status != "" {
		st, err := core.ParseJobStatus(s.Status)
		if err != nil {
			return ports.StatusReport{}, err
		}
		status = st
	}
	phase, err := core.ParsePhase(s.Phase)
	if err != nil {
		return ports.StatusReport{}, err
	}
	if s.ArtifactStatus != "" {
		if _, err := core.ParseArtifactStatus(s.ArtifactStatus); err != nil {
			return ports.StatusReport{}, err
		}
	}
	if s.Ext4SHA256 != "" && !isSHA256Hex(s.Ext4SHA256) {
		return ports.StatusReport{}, &core.FieldError{Field: "ext4_sha256", Reason: "must be 64 hex characters"}
	}
	if s.ArtifactID != "" {
		if err := ValidateID("artifact_id", s.ArtifactID); err != nil {
			return ports.StatusReport{}, err
		}
	}
	u := core.JobUpdate{
		Status:            status,
		Phase:             phase,
		ErrorMessage:      s.ErrorMessage,
		ArtifactID:        s.ArtifactID,
		Fingerprint:       s.TemplateSpecFingerprint,
		SourceImageDigest: s.SourceImageDigest,
		ArtifactStatus:    s.ArtifactStatus,
	}
	if s.Progress != nil {
		p := int(min(*s.Progress, 100))
		u.Progress = &p
	}
	for ph, ms := range s.PhaseDurationsMS {
		p, err := core.ParsePhase(ph)
		if err != nil || p == "" {
			return ports.StatusReport{}, &core.FieldError{Field: "phase_durations_ms", Reason: fmt.Sprintf("unknown phase %q", ph)}
		}
		if u.PhaseDurations == nil {
			u.PhaseDurations = core.PhaseDurations{}
		}
		u.PhaseDurations[p] = time.Duration(max(ms, 0)) * time.Millisecond
	}
	if s.PullTotalBytes != nil || s.PullDownloadedBytes != nil || s.PullTotalLayers != nil ||
		s.PullCompletedLayers != nil || s.PullSpeedBPS != nil {
		u.Pull = &core.PullProgress{
			TotalBytes:      val(s.PullTotalBytes),
			DownloadedBytes: val(s.PullDownloadedBytes),
			TotalLayers:     int(val(s.PullTotalLayers)),
			CompletedLayers: int(val(s.PullCompletedLayers)),
			SpeedBPS:        val(s.PullSpeedBPS),
		}
	}
	out := ports.StatusReport{Update: u}
	if status == core.JobBuilt {
		if in := s.Inputs; in != nil {
			out.Inputs = &core.BuildInputs{SourceImageDigest: in.SourceImageDigest, CAFingerprint: in.CAFingerprint,
				EnvdSHA256: in.EnvdSHA256, BuilderFormat: in.BuilderFormat, Builder: in.Builder}
		}
		out.Artifact = &core.Artifact{
			ArtifactID:        s.ArtifactID,
			Fingerprint:       s.TemplateSpecFingerprint,
			SourceImageRef:    s.SourceImageRef,
			SourceImageDigest: s.SourceImageDigest,
			DownloadBaseURL:   s.MasterNodeIP,
			Ext4Path:          s.Ext4Path,
			Ext4SHA256:        s.Ext4SHA256,
			Ext4SizeBytes:     val(s.Ext4SizeBytes),
			ImageConfigJSON:   s.ImageConfigJSON,
			WritableLayerSize: s.WritableLayerSize,
			Status:            core.ArtifactStatus(s.ArtifactStatus),
			StorageBackend:    s.StorageBackend,
			ObjectKey:         s.ObjectKey,
		}
		if s.CubeEgressCABaked != nil {
			out.Artifact.CubeEgressCABaked = *s.CubeEgressCABaked
		}
		if s.CubeEgressCAFingerprint != nil {
			out.Artifact.CubeEgressCAFingerprint = *s.CubeEgressCAFingerprint
		}
		out.Artifact.CubeEgressCATargetsWritten = val(s.CubeEgressCATargetsWritten)
		// The stored result is the sanitized body, never the raw one: only
		// whitelisted fields reach the database.
		b, err := json.Marshal(s)
		if err != nil {
			return ports.StatusReport{}, fmt.Errorf("encode result_json: %w", err)
		}
		out.Update.ResultJSON = string(b)
	}
	return out, nil
}

// fields reads typed values out of a decoded object, keeping the first
// error.
type fields struct {
	raw map[string]json.RawMessage
	err error
}

func (d *fields) get(name string) (json.RawMessage, bool) {
	v, ok := d.raw[name]
	if !ok || d.err != nil || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		return nil, false
	}
	return v, true
}

func (d *fields) fail(name, reason string) {
	d.err = &core.FieldError{Field: name, Reason: reason}
}

func (d *fields) strPtr(name string) *string {
	v, ok := d.get(name)
	if !ok {
		return nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		d.fail(name, "expected string")
		return nil
	}
	return &s
}

func (d *fields) bool(name string) *bool {
	v, ok := d.get(name)
	if !ok {
		return nil
	}
	var b bool
	if err := json.Unmarshal(v, &b); err != nil {
		d.fail(name, "expected true or false")
		return nil
	}
	return &b
}

// inputs reads an object of strings (template_spec_inputs).
func (d *fields) inputs(name string) *SpecInputs {
	v, ok := d.get(name)
	if !ok {
		return nil
	}
	var in SpecInputs
	if err := json.Unmarshal(v, &in); err != nil {
		d.fail(name, "expected an object of strings")
		return nil
	}
	return &in
}

func (d *fields) str(name string) string {
	if p := d.strPtr(name); p != nil {
		return *p
	}
	return ""
}

// durations reads an object of non-negative millisecond counts.
func (d *fields) durations(name string) map[string]int64 {
	v, ok := d.get(name)
	if !ok {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(v, &m); err != nil {
		d.fail(name, "expected an object of milliseconds by phase")
		return nil
	}
	out := make(map[string]int64, len(m))
	sub := fields{raw: m}
	for k := range m {
		if n := sub.int(k); n != nil {
			out[k] = *n
		}
	}
	if sub.err != nil {
		d.fail(name, sub.err.Error())
		return nil
	}
	return out
}

// int accepts a JSON number, integral or not (a float is truncated toward
// zero), that fits in int64 and is not negative.
func (d *fields) int(name string) *int64 {
	v, ok := d.get(name)
	if !ok {
		return nil
	}
	v = bytes.TrimSpace(v)
	var n json.Number
	if len(v) == 0 || v[0] == '"' || json.Unmarshal(v, &n) != nil {
		d.fail(name, "expected number")
		return nil
	}
	i, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(n.String(), 64)
		if ferr != nil || math.IsNaN(f) || f >= math.MaxInt64 || f <= math.MinInt64 {
			d.fail(name, "number out of range")
			return nil
		}
		i = int64(f)
	}
	if i < 0 {
		d.fail(name, "must not be negative")
		return nil
	}
	return &i
}

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

func i64(v int64) *int64 { return &v }

func val(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// firstNonEmpty returns a unless it is empty, then b.
func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
