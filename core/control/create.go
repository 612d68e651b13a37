package control

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

// redispatchAfter is how long a PENDING job must have gone without an update
// before an identical resubmit forwards it to the data plane again.
const redispatchAfter = 15 * time.Second

// CreateFromImage submits a from-image template build (POST
// /cube/template/from-image). It validates and normalizes req in place,
// applies the job rules of SubmitFromImage (an identical
// active request returns its job, a different one is
// *core.ActiveJobError, an existing non-FAILED template
// core.ErrDuplicateTemplate) and forwards a newly created PENDING job to
// the data plane with the download base URL nodes will fetch the artifact
// from (normally the base URL of the API request).
//
// A dispatch that fails never leaves a PENDING job behind: the job is
// failed with the reason, and both the FAILED job and the error are
// returned (other errors return a nil job); core.ErrBusy (data plane
// at capacity) stays visible through errors.Is so the API can answer
// "busy, retry". An alias in the request that another template holds is
// refused up front with core.ErrConflict.
func (s *Service) CreateFromImage(ctx context.Context, req *core.FromImageRequest, downloadBaseURL string) (*core.Job, error) {
	return s.CreateFromImageWithEnvd(ctx, req, downloadBaseURL, nil)
}

// CreateFromImageWithEnvd is CreateFromImage with the envd binary the
// caller uploaded (upstream's multipart create-from-image); nil means the
// one this control plane is configured with (EnvdSource), if the request
// opts in to injection at all. An upload is checked as upstream checks it
// (core.ValidateEnvdUpload) and needs the request's opt-in annotation; it
// is sent to the data plane with its sha256, which the artifact's
// fingerprint covers. It is not kept: a redo that must rebuild the image
// injects the configured binary.
func (s *Service) CreateFromImageWithEnvd(ctx context.Context, req *core.FromImageRequest, downloadBaseURL string, envd []byte) (*core.Job, error) {
	n, err := core.NormalizeFromImageRequest(req, s.IDs.NewHex)
	if err != nil {
		return nil, err
	}
	if err := ValidateOverrides(req); err != nil {
		return nil, err
	}
	optIn := "container_overrides.annotations." + core.AnnotationInjectEnvd
	switch {
	case envd != nil && !WantsEnvd(req):
		return nil, &core.FieldError{Field: "envd",
			Reason: "an envd binary was uploaded but the request does not opt in to injection (set " + optIn + "=true)"}
	case envd != nil:
		if err := core.ValidateEnvdUpload(envd); err != nil {
			return nil, err
		}
	case WantsEnvd(req) && s.Envd == nil:
		return nil, &core.FieldError{Field: optIn,
			Reason: "envd injection was requested but no envd binary came with it (upload one: create-from-image --enable-inject-envd --envd-path FILE) and this control plane has none configured"}
	}
	if err := s.checkAliasFree(ctx, req.TemplateID, req.Alias); err != nil {
		return nil, err
	}
	if err := s.checkScopeKnown(ctx, req.InstanceType, req.DistributionScope); err != nil {
		return nil, err
	}
	res, err := s.submitFromImage(ctx, n)
	if err != nil {
		return nil, err
	}
	if res.Job.Status != core.JobPending {
		return res.Job, nil
	}
	// A PENDING job an identical resubmit finds that has not moved for a
	// while is forwarded again: the master that wrote it may have died
	// before forwarding it, and a data plane that already has it answers
	// "in flight", which is fine. A fresh one is being forwarded now.
	if !res.Created && s.storeNow(ctx).Sub(res.Job.UpdatedAt) < redispatchAfter {
		return res.Job, nil
	}
	return s.dispatch(ctx, res.Job, n, downloadBaseURL, envd)
}

// dispatch forwards a PENDING job to the data plane, failing the job if it
// cannot. n still carries the registry credentials (they are never
// stored, so only the submitting call can pass them on). envd is an
// uploaded agent binary, or nil for the configured one.
func (s *Service) dispatch(ctx context.Context, job *core.Job, n core.NormalizedRequest, downloadBaseURL string, envd []byte) (*core.Job, error) {
	if job.Status != core.JobPending || job.Phase.PostBuild() {
		// Only PENDING jobs that still need a build go to the data plane;
		// a BUILT job sent again would be refused there and wrongly failed
		// here, and a redo that reuses its artifact (PENDING in a
		// post-build phase) has nothing to build: its resume runs here.
		return job, nil
	}
	req := n.Request()
	br := ports.BuildRequest{JobID: job.JobID, Request: req, DownloadBaseURL: core.NormalizeBaseURL(firstString(s.Config.DownloadBaseURL, downloadBaseURL))}
	if WantsEnvd(req) {
		data := envd
		if data == nil {
			var err error
			if data, err = s.loadEnvd(ctx); err != nil {
				return s.failDispatch(ctx, job, err)
			}
		}
		sum := sha256.Sum256(data)
		br.EnvdData, br.EnvdSHA256 = data, hex.EncodeToString(sum[:])
	}
	if core.WantsCubeCA(req) && s.CubeCA != nil {
		ca, err := s.CubeCA.CubeCA(ctx)
		switch {
		case err == nil:
			br.CubeCA = ca
		case errors.Is(err, core.ErrNotFound):
			// None here: the data plane bakes its own if it has one, and
			// the template says it was built without one otherwise.
		default:
			return s.failDispatch(ctx, job, fmt.Errorf("with_cube_ca=true (the default): %w", err))
		}
	}
	err := s.DataPlane.SubmitBuild(ctx, br)
	switch {
	case err == nil:
		s.log().Info("build submitted to the data plane", "job", job.JobID, "template", job.TemplateID, "image", req.SourceImageRef)
		return job, nil
	case errors.Is(err, core.ErrConflict):
		// Already in flight on the data plane: it has the job.
		s.log().Info("data plane already has the job", "job", job.JobID)
		return job, nil
	case errors.Is(err, core.ErrBusy):
		return s.failDispatch(ctx, job, fmt.Errorf("the data plane is at capacity, retry later: %w", err))
	}
	return s.failDispatch(ctx, job, fmt.Errorf("forward build to the data plane: %w", err))
}

func (s *Service) loadEnvd(ctx context.Context) ([]byte, error) {
	if s.Envd == nil {
		return nil, fmt.Errorf("envd injection requested but no envd binary is configured (an envd uploaded with the create is not kept; configure one to rebuild): %w", core.ErrUnsupported)
	}
	data, err := s.Envd.Envd(ctx)
	if err != nil {
		return nil, fmt.Errorf("load envd binary: %w", err)
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("load envd binary: it is empty: %w", core.ErrInvalidArgument)
	}
	return data, nil
}

// failDispatch fails a job that never reached the data plane and returns
// the failed job with cause. Only a job still PENDING before its build is
// failed: any other state means a data plane took it after all (the
// answer was lost, or this was a second forward that reached another
// replica, which found the job RUNNING or BUILT and said "not pending" or
// "busy"), and that build must not be ended by an answer about a forward
// it does not need. Such a job is returned as it is, without an error,
// unless it has already failed.
func (s *Service) failDispatch(ctx context.Context, job *core.Job, cause error) (*core.Job, error) {
	wctx, cancel := detached(ctx, 30*time.Second)
	defer cancel()
	u := core.Fail(job.Phase, cause.Error())
	failed, err := s.Store.Jobs().Update(wctx, job.JobID, func(cur *core.Job) error {
		if cur.Status != core.JobPending || cur.Phase.PostBuild() {
			return errJobMoved
		}
		return cur.Apply(u)
	})
	if errors.Is(err, errJobMoved) {
		cur, gerr := s.Store.Jobs().Get(wctx, job.JobID)
		if gerr != nil {
			return job, fmt.Errorf("job %s: %w", job.JobID, gerr)
		}
		s.log().Info("data plane answer ignored: the job has moved on", "job", job.JobID, "status", cur.Status, "answer", cause)
		if cur.Status == core.JobFailed {
			return cur, fmt.Errorf("job %s: %w", job.JobID, cause)
		}
		return cur, nil
	}
	if err != nil {
		s.log().Error("dispatch failure not recorded", "job", job.JobID, "cause", cause, "err", err)
		failed = job
	}
	return failed, fmt.Errorf("job %s: %w", job.JobID, cause)
}

func sortedStrings(in []string) []string {
	out := slices.Clone(in)
	slices.Sort(out)
	return out
}

// checkScopeKnown refuses a distribution scope entry that names no node:
// neither a node id the directory knows (healthy or not) nor the IP of a
// healthy node of the instance type. Such a job could only fail later, at
// DISTRIBUTING, after the whole build. A known node that is down is left
// to distribution, which records it.
func (s *Service) checkScopeKnown(ctx context.Context, instanceType string, scope []string) error {
	if len(scope) == 0 {
		return nil
	}
	if instanceType == "" {
		instanceType = core.DefaultInstanceType
	}
	healthy, err := s.Nodes.HealthyNodes(ctx, instanceType)
	if err != nil {
		return fmt.Errorf("list healthy %s nodes: %w", instanceType, err)
	}
	var unknown []string
	for _, want := range scope {
		if slices.ContainsFunc(healthy, func(n ports.Node) bool { return n.ID == want || n.IP != "" && n.IP == want }) {
			continue
		}
		switch _, err := s.Nodes.Get(ctx, want); {
		case err == nil:
		case errors.Is(err, core.ErrNotFound):
			unknown = append(unknown, want)
		default:
			return fmt.Errorf("node %s: %w", want, err)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	known := make([]string, 0, len(healthy))
	for _, n := range healthy {
		known = append(known, n.ID)
	}
	slices.Sort(known)
	return &core.FieldError{Field: "distribution_scope", Reason: fmt.Sprintf("%s: no such node (healthy %s nodes: %s)",
		strings.Join(unknown, ", "), instanceType, firstString(strings.Join(known, ", "), "none"))}
}
