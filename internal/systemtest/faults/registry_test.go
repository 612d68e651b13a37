package faults

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cubesandbox/templatecenter/internal/systemtest/faults/harness"
)

func (w *world) registryScenarios(t *testing.T) {
	c := w.c
	w.scenario(t, "RegistryTransient5xx", "a registry answering 503 to the first blob requests is retried: the build succeeds (I6)", func(t *testing.T) map[string]any {
		ref, dg := c.PushImage("r5xx", 256<<10)
		c.RegProxy.Add(harness.Rule{Target: harness.Blobs, Digest: dg, Times: 2, Kind: harness.FaultStatus, Status: 503})
		w.mustReady(t, w.create(t, "tpl-r5xx", ref))
		return map[string]any{"injected_503": faultsServed(c, dg, harness.FaultStatus), "blob_gets": sum(c.RegProxy.BlobGets(dg))}
	})
	w.scenario(t, "Registry429RetryAfter", "429 with Retry-After is waited out and retried: the build succeeds (I6)", func(t *testing.T) map[string]any {
		ref, dg := c.PushImage("r429", 256<<10)
		c.RegProxy.Add(harness.Rule{Target: harness.Blobs, Digest: dg, Times: 2, Kind: harness.FaultStatus, Status: 429, RetryAfter: "1"})
		w.mustReady(t, w.create(t, "tpl-r429", ref))
		var first, ok time.Time
		for _, r := range c.RegProxy.Requests() {
			if r.Digest == dg && r.Method == http.MethodGet {
				if r.Fault != "" && first.IsZero() {
					first = r.At
				}
				if r.Fault == "" && r.Status == 200 || r.Status == 206 {
					ok = r.At
				}
			}
		}
		return map[string]any{"injected_429": faultsServed(c, dg, harness.FaultStatus), "first_429_to_good_get_s": ok.Sub(first).Seconds()}
	})
	w.scenario(t, "RegistryTruncatedBody", "a blob body cut mid-way is resumed or refetched, never used short: the build succeeds with verified bytes (I2)", func(t *testing.T) map[string]any {
		ref, dg := c.PushImage("rtrunc", 1<<20)
		c.RegProxy.Add(harness.Rule{Target: harness.Blobs, Digest: dg, Times: 1, Kind: harness.FaultTruncate, Offset: 300 << 10})
		w.mustReady(t, w.create(t, "tpl-rtrunc", ref))
		ranged := 0
		for _, r := range c.RegProxy.Requests() {
			if r.Digest == dg && r.Method == http.MethodGet && r.Range != "" {
				ranged++
			}
		}
		return map[string]any{"blob_gets": sum(c.RegProxy.BlobGets(dg)), "ranged_gets": ranged}
	})
	w.scenario(t, "RegistryWrongDigest", "a blob whose bytes do not match its digest fails the build and is not cached; a redo after the registry recovers succeeds (I2)", func(t *testing.T) map[string]any {
		ref, dg := c.PushImage("rdigest", 256<<10)
		heal := c.RegProxy.Add(harness.Rule{Target: harness.Blobs, Digest: dg, Kind: harness.FaultCorrupt, Offset: 1000})
		j := w.mustFail(t, w.create(t, "tpl-rdigest", ref), 2*time.Minute, "digest mismatch", "does not match")
		if faultsServed(c, dg, harness.FaultCorrupt) == 0 {
			t.Errorf("the corrupt blob was never served (the build failed before it: %s)", j.ErrorMessage)
		}
		hex := strings.TrimPrefix(dg, "sha256:")
		for i, d := range c.TCDirs {
			if _, err := os.Stat(filepath.Join(d, "layer-cache", "blobs", "sha256", hex)); err == nil {
				t.Errorf("templatecenter-%d cached the corrupt blob %s", i, dg)
			}
		}
		heal()
		w.redo(t, "tpl-rdigest")
		return map[string]any{"corrupt_gets": faultsServed(c, dg, harness.FaultCorrupt), "error": short(j.ErrorMessage)}
	})
	w.scenario(t, "RegistrySlowBody", "a slow but moving body is waited for, even when the pull outlasts the reconciler's PULLING window (the build heartbeats): the build succeeds (I6)", func(t *testing.T) map[string]any {
		ref, dg := c.PushImage("rslow", 1<<20)
		// About 9 s of pulling against a 6 s PULLING window.
		c.RegProxy.Add(harness.Rule{Target: harness.Blobs, Digest: dg, Kind: harness.FaultSlow, Chunk: 128 << 10, Delay: time.Second})
		start := time.Now()
		w.mustReady(t, w.create(t, "tpl-rslow", ref))
		return map[string]any{"build_s": time.Since(start).Seconds()}
	})
	w.scenario(t, "RegistryManifest503", "503 on the manifest is retried: the build succeeds (I6)", func(t *testing.T) map[string]any {
		ref, _ := c.PushImage("rman", 64<<10)
		c.RegProxy.Add(harness.Rule{Target: harness.Manifests, Repo: "/faults/rman/", Times: 2, Kind: harness.FaultStatus, Status: 503})
		w.mustReady(t, w.create(t, "tpl-rman", ref))
		return nil
	})
	// Failing for good takes the retries and backoff of a real build; the
	// three run side by side.
	w.group(t, "RegistryFailures",
		sc{"RegistryPermanent5xx", "a registry that keeps failing fails the build cleanly; once it recovers a redo succeeds (I2, I6)", func(t *testing.T) map[string]any {
			ref, dg := c.PushImage("r500", 256<<10)
			heal := c.RegProxy.Add(harness.Rule{Target: harness.Blobs, Digest: dg, Kind: harness.FaultStatus, Status: 500})
			j := w.mustFail(t, w.create(t, "tpl-r500", ref), 2*time.Minute, "500", "fetch", "pull")
			n := faultsServed(c, dg, harness.FaultStatus)
			heal()
			w.redo(t, "tpl-r500")
			return map[string]any{"injected_500": n, "error": short(j.ErrorMessage)}
		}},
		sc{"RegistryAlwaysTruncated", "a registry that always cuts the body fails the build after bounded retries; a redo after it recovers succeeds (I2, I6)", func(t *testing.T) map[string]any {
			ref, dg := c.PushImage("rtrunc2", 1<<20)
			heal := c.RegProxy.Add(harness.Rule{Target: harness.Blobs, Digest: dg, Kind: harness.FaultTruncate, Offset: 100 << 10})
			j := w.mustFail(t, w.create(t, "tpl-rtrunc2", ref), 2*time.Minute)
			gets := sum(c.RegProxy.BlobGets(dg))
			heal()
			w.redo(t, "tpl-rtrunc2")
			return map[string]any{"blob_gets_before_failing": gets, "error": short(j.ErrorMessage)}
		}},
		sc{"RegistryStalled", "a registry that stops sending fails the build as stalled after CUBE_TEMPLATE_CENTER_REGISTRY_TIMEOUT ; no build is left running (I6)", func(t *testing.T) map[string]any {
			ref, dg := c.PushImage("rstall", 256<<10)
			heal := c.RegProxy.Add(harness.Rule{Target: harness.Blobs, Digest: dg, Kind: harness.FaultStall})
			start := time.Now()
			j := w.mustFail(t, w.create(t, "tpl-rstall", ref), 2*time.Minute, "stall", "timeout", "deadline")
			took := time.Since(start)
			heal()
			w.redo(t, "tpl-rstall")
			return map[string]any{"time_to_fail_s": took.Seconds(), "error": short(j.ErrorMessage)}
		}},
		sc{"RegistryTrickle", "a registry that sends a few bytes at a time, never idle long enough to count as stalled, fails the build at CUBE_TEMPLATE_CENTER_BUILD_TIMEOUT instead of holding a build slot for ever; a redo after it recovers succeeds (I6)", func(t *testing.T) map[string]any {
			ref, dg := c.PushImage("rtrickle", 256<<10)
			// 1 KiB every 2 s (the idle timeout is 5 s): about 4 minutes
			// for the layer.
			heal := c.RegProxy.Add(harness.Rule{Target: harness.Blobs, Digest: dg, Kind: harness.FaultSlow, Chunk: 1 << 10, Delay: 2 * time.Second})
			start := time.Now()
			j := w.mustFail(t, w.create(t, "tpl-rtrickle", ref), buildTimeout+time.Minute, "CUBE_TEMPLATE_CENTER_BUILD_TIMEOUT")
			took := time.Since(start)
			if took < buildTimeout {
				t.Errorf("failed after %s, before the %s build limit", took, buildTimeout)
			}
			heal()
			w.redo(t, "tpl-rtrickle")
			return map[string]any{"time_to_fail_s": took.Seconds(), "error": short(j.ErrorMessage)}
		}},
	)
}

func faultsServed(c *harness.Cluster, dg string, k harness.FaultKind) int {
	n := 0
	for _, r := range c.RegProxy.Requests() {
		if r.Digest == dg && r.Fault == k {
			n++
		}
	}
	return n
}

func sum(m map[int]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
