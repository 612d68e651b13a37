package faults

import (
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/internal/systemtest/faults/harness"
)

func (w *world) s3Scenarios(t *testing.T) {
	c := w.c
	w.scenario(t, "S3Transient503", "one failed upload is retried by the S3 client: the build succeeds (I6)", func(t *testing.T) map[string]any {
		ref, _ := c.PushImage("s3flaky", 64<<10)
		c.S3.Add(harness.S3Rule{Kind: harness.S3Fail, Status: 503, Times: 1})
		w.mustReady(t, w.create(t, "tpl-s3flaky", ref))
		return map[string]any{"failed_writes": c.S3.Count(harness.S3Put, false) - c.S3.Count(harness.S3Put, true)}
	})
	w.scenario(t, "S3Down", "an S3 server refusing every upload fails the build with nothing published and the artifact row FAILED; once S3 is back a redo succeeds (I2, I4)", func(t *testing.T) map[string]any {
		ref, _ := c.PushImage("s3down", 64<<10)
		c.S3.Add(harness.S3Rule{Kind: harness.S3Fail, Status: 503, Chunks: true})
		j := w.mustFail(t, w.create(t, "tpl-s3down", ref), 2*time.Minute, "publish", "put", "503", "upload")
		_, _, aid := c.JobRow(j.JobID)
		if aid == "" {
			t.Fatal("failed job names no artifact")
		}
		if c.ObjectExists(aid) {
			t.Errorf("artifact %s has an object although every upload failed", aid)
		}
		if st, _ := c.ArtifactRow(aid); st == "READY" {
			t.Errorf("artifact %s is READY although its upload failed", aid)
		}
		attempts := len(c.S3.Requests())
		c.S3.Clear()
		w.redo(t, "tpl-s3down")
		return map[string]any{"refused_requests": attempts, "error": short(j.ErrorMessage)}
	})
	w.scenario(t, "S3CorruptAfterAck", "an S3 server that acknowledges an upload but stores other bytes fails the build (the upload is read back) with no object and no READY artifact left; a redo succeeds (I2, I4)", func(t *testing.T) map[string]any {
		ref, _ := c.PushImage("s3corrupt", 64<<10)
		c.S3.Add(harness.S3Rule{Kind: harness.S3CorruptAfterAck, Ops: []string{harness.S3Put, harness.S3Complete}, Times: 1})
		j := w.mustFail(t, w.create(t, "tpl-s3corrupt", ref), 2*time.Minute, "holds other bytes")
		_, _, aid := c.JobRow(j.JobID)
		if st, _ := c.ArtifactRow(aid); st == "READY" {
			t.Errorf("artifact %s is READY with bytes that do not match it", aid)
		}
		if c.ObjectExists(aid) {
			t.Errorf("the corrupt object of %s is still in the bucket", aid)
		}
		c.CheckInvariants(t, true)
		c.S3.Clear()
		w.redo(t, "tpl-s3corrupt")
		return map[string]any{"error": short(j.ErrorMessage)}
	})
}
