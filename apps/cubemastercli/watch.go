package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/cubeview"
)

const (
	statusReady  = "READY"
	statusFailed = "FAILED"
)

func terminal(j *cubeview.JobInfo) bool { return j.Status == statusReady || j.Status == statusFailed }

// follow polls pollPath?job_id= until the job is READY or FAILED. first,
// when non-nil, is the job as submission returned it. The progress goes
// through a display (live lines on a terminal, plain lines elsewhere);
// with --json every response whose job changed is printed as one compact
// JSON object on its own line (newline-delimited JSON: the last line is
// the job's end). A FAILED job is an error (exit 1) and a job that ended
// READY on only some of its nodes is a partial result (exit 3), with or
// without --json: scripts read the exit status.
func (a *app) follow(ctx context.Context, c *client, pollPath, jobID string, first *cubeview.JobInfo, w waitFlags) error {
	d := newDisplay(a.out, !w.json && stdoutIsTerminal(a.out))
	var (
		job     = first
		lastJob []byte
	)
	show := func(j *cubeview.JobInfo, raw []byte) error {
		if !w.json {
			d.show(j)
			return nil
		}
		key := mustJSON(j)
		if raw == nil || bytes.Equal(key, lastJob) {
			return nil
		}
		lastJob = key
		return a.printLine(raw)
	}
	if job != nil {
		if err := show(job, nil); err != nil {
			return err
		}
	}
	for polled := false; job == nil || !terminal(job) || !polled && w.json; polled = true {
		if job != nil {
			if err := sleep(ctx, w.interval); err != nil {
				d.interrupt()
				return fmt.Errorf("detached from job %s; follow it with: cubemastercli tpl watch %s", jobID, jobID)
			}
		}
		var resp cubeview.JobResponse
		r, err := c.do(ctx, http.MethodGet, pollPath, url.Values{"job_id": {jobID}}, nil, &resp)
		if err != nil {
			d.interrupt()
			return err
		}
		if resp.Job == nil {
			d.interrupt()
			return fmt.Errorf("job %s: the master answered without a job", jobID)
		}
		job = resp.Job
		if err := show(job, r); err != nil {
			return err
		}
	}
	if !w.json {
		d.end(job)
		printJob(a.out, job)
	}
	return outcome(job)
}

// Exit statuses of the commands that follow a job (documented in the
// command's help and docs/operations.md).
const (
	exitFailed  = 1 // the job FAILED, or the CLI could not do what was asked
	exitPartial = 3 // the job is READY, but not on every one of its nodes
)

// exitError carries an exit status other than 1.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// outcome is the error a finished job ends the command with: nil when it
// is READY on every node, a FAILED job's reason (exit 1), or a partial
// result naming the nodes that did not get it (exit 3).
func outcome(j *cubeview.JobInfo) error {
	if j.Status == statusFailed {
		msg := j.ErrorMessage
		if msg == "" {
			msg = "no error message"
		}
		return fmt.Errorf("job %s FAILED in phase %s: %s", j.JobID, dash(j.Phase), msg)
	}
	if j.Status == statusReady && (j.TemplateStatus == "PARTIALLY_READY" || j.FailedNodeCount > 0 ||
		j.ExpectedNodeCount > 0 && j.ReadyNodeCount < j.ExpectedNodeCount) {
		_, failed := nodeNames(j)
		which := ""
		if len(failed) > 0 {
			which = " (not on " + strings.Join(failed, ", ") + ")"
		}
		return &exitError{code: exitPartial, err: fmt.Errorf("job %s is READY on %d of %d nodes%s; nodes that come back get the template on their own, or run: cubemastercli tpl redo %s --failed-only",
			j.JobID, j.ReadyNodeCount, j.ExpectedNodeCount, which, j.TemplateID)}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func kv(w io.Writer, k, v string) {
	if v != "" {
		fmt.Fprintf(w, "%-26s %s\n", k+":", v)
	}
}

// printJob prints the job as key: value lines; empty fields are left out.
func printJob(w io.Writer, j *cubeview.JobInfo) {
	kv(w, "job_id", j.JobID)
	kv(w, "build_id", j.JobID) // what tpl build-status takes
	kv(w, "template_id", j.TemplateID)
	if j.AttemptNo > 0 {
		kv(w, "attempt_no", fmt.Sprint(j.AttemptNo))
	}
	kv(w, "retry_of_job_id", j.RetryOfJobID)
	kv(w, "operation", j.Operation)
	kv(w, "redo_mode", j.RedoMode)
	kv(w, "redo_scope", strings.Join(j.RedoScope, ","))
	kv(w, "resume_phase", j.ResumePhase)
	kv(w, "artifact_id", j.ArtifactID)
	kv(w, "status", j.Status)
	kv(w, "phase", j.Phase)
	kv(w, "progress", fmt.Sprintf("%d%%", j.Progress))
	kv(w, "distribution", fmt.Sprintf("%d/%d ready, %d failed", j.ReadyNodeCount, j.ExpectedNodeCount, j.FailedNodeCount))
	kv(w, "template_spec_fingerprint", j.TemplateSpecFingerprint)
	kv(w, "template_status", j.TemplateStatus)
	kv(w, "artifact_status", j.ArtifactStatus)
	if a := j.Artifact; a != nil {
		kv(w, "artifact_sha256", a.Ext4SHA256)
		if a.Ext4SizeBytes > 0 {
			kv(w, "artifact_size", humanBytes(a.Ext4SizeBytes))
		}
		kv(w, "artifact_backend", a.StorageBackend)
	}
	kv(w, "error", oneLine(j.ErrorMessage))
}

func printTemplate(w io.Writer, t *cubeview.TemplateResponse) {
	kv(w, "template_id", t.TemplateID)
	kv(w, "alias", t.Alias)
	kv(w, "status", t.Status)
	kv(w, "instance_type", t.InstanceType)
	kv(w, "backend", t.Backend)
	kv(w, "version", t.Version)
	kv(w, "created_at", t.CreatedAt)
	kv(w, "image_info", t.ImageInfo)
	kv(w, "job_id", t.JobID)
	kv(w, "last_error", oneLine(t.LastError))
	// As upstream prints it, whether or not the CA is baked.
	fp := t.CubeEgressCAFingerprint
	if fp == "" {
		fp = "(none)"
	} else if len(fp) > 16 {
		fp = fp[:16]
	}
	kv(w, "cube_egress_ca", fmt.Sprintf("baked=%t fingerprint=%s targets_written=%d", t.CubeEgressCABaked, fp, t.CubeEgressCATargetsWritten))
	kv(w, "cube_egress_ca_note", t.CubeEgressCANote)
	if len(t.Replicas) == 0 {
		fmt.Fprintln(w, "replicas: none")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE_ID\tNODE_IP\tSTATUS\tPHASE\tARTIFACT_ID\tSNAPSHOT_PATH\tERROR")
	for _, r := range t.Replicas {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.NodeID, dash(r.NodeIP), dash(r.Status), dash(r.Phase),
			dash(r.ArtifactID), dash(r.SnapshotPath), dash(oneLine(r.ErrorMessage)))
	}
	_ = tw.Flush()
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return []byte(fmt.Sprintf("%q", fmt.Sprint(v)))
	}
	return b
}
