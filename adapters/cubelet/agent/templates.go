package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/cubesandbox/templatecenter/adapters/cubelet/cubeletpb"
	"github.com/cubesandbox/templatecenter/core"
)

type cubeboxServer struct {
	cubeletpb.UnimplementedCubeboxMgrServer
	a *Agent
}

// TemplateFile is the name of the run template record in a template dir.
const TemplateFile = "template.json"

// TemplateRecord is what AppSnapshot writes to
// <data>/templates/<templateID>/template.json.
type TemplateRecord struct {
	TemplateID   string `json:"template_id"`
	SandboxID    string `json:"sandbox_id"`
	NodeID       string `json:"node_id"`
	InstanceType string `json:"instance_type"`
	// ArtifactIDs are the ext4 rootfs artifacts the template runs on, and
	// RootfsFiles where they are on this node.
	ArtifactIDs []string `json:"artifact_ids"`
	RootfsFiles []string `json:"rootfs_files"`
	// RequestedSnapshotDir is the snapshot_dir the caller asked for. The
	// agent records it but always stores under its data dir.
	RequestedSnapshotDir string    `json:"requested_snapshot_dir,omitempty"`
	CreatedAt            time.Time `json:"created_at"`
	// CreateRequest is the RunCubeSandboxRequest as protobuf JSON, with
	// the artifact download token redacted.
	CreateRequest json.RawMessage `json:"create_request"`
}

// AppSnapshot checks the request and that its rootfs artifacts are on this
// node, then records the local run template. No VM is booted.
func (s cubeboxServer) AppSnapshot(ctx context.Context, req *cubeletpb.AppSnapshotRequest) (*cubeletpb.AppSnapshotResponse, error) {
	a := s.a
	cr := req.GetCreateRequest()
	resp := &cubeletpb.AppSnapshotResponse{RequestID: cr.GetRequestID()}
	tid := cr.GetAnnotations()[core.AnnotationTemplateID]
	log := a.log.With("rpc", "AppSnapshot", "request_id", cr.GetRequestID(), "template_id", tid)
	bad := func(format string, args ...any) (*cubeletpb.AppSnapshotResponse, error) {
		msg := fmt.Sprintf(format, args...)
		log.Warn("bad request", "err", msg)
		resp.Ret = fail(cubeletpb.ErrorCode_InvalidParamFormat, "node %s: AppSnapshot: %s", a.cfg.NodeID, msg)
		return resp, nil
	}
	if cr == nil {
		return bad("create_request is required")
	}
	if v := cr.GetAnnotations()[core.AnnotationAppSnapshotCreate]; v != "true" {
		return bad("annotation %s must be \"true\", got %q", core.AnnotationAppSnapshotCreate, v)
	}
	if tid == "" {
		return bad("annotation %s is required", core.AnnotationTemplateID)
	}
	if err := checkName("template id", tid); err != nil {
		return bad("%v", err)
	}
	instanceType := cr.GetInstanceType()
	if instanceType == "" {
		instanceType = core.DefaultInstanceType
	}
	if err := checkInstanceType(instanceType); err != nil {
		return bad("%v", err)
	}
	aids, err := rootfsArtifacts(cr)
	if err != nil {
		return bad("%v", err)
	}
	var files []string
	var rootfsBytes int64
	for _, aid := range aids {
		p := a.ArtifactFile(instanceType, aid)
		st, err := os.Stat(p)
		if err != nil || !st.Mode().IsRegular() {
			log.Warn("rootfs artifact missing", "artifact_id", aid)
			resp.Ret = fail(cubeletpb.ErrorCode_PreConditionFailed,
				"node %s: AppSnapshot %s: rootfs artifact %s (instance type %s) is not present on this node; distribute it with CreateImage first",
				a.cfg.NodeID, tid, aid, instanceType)
			return resp, nil
		}
		files = append(files, p)
		rootfsBytes += st.Size()
	}

	unlock, err := a.locks.lock(ctx, "template/"+tid)
	if err != nil {
		log.Warn("snapshot abandoned", "err", err)
		resp.Ret = fail(cubeletpb.ErrorCode_GrpcError, "node %s: AppSnapshot %s: %v", a.cfg.NodeID, tid, err)
		return resp, nil
	}
	defer unlock()
	rec := TemplateRecord{
		TemplateID:           tid,
		SandboxID:            a.cfg.NewSandboxID(),
		NodeID:               a.cfg.NodeID,
		InstanceType:         instanceType,
		ArtifactIDs:          aids,
		RootfsFiles:          files,
		RequestedSnapshotDir: req.GetSnapshotDir(),
		CreatedAt:            a.cfg.Now().UTC(),
	}
	rec.CreateRequest, err = protojson.Marshal(redactTokens(cr))
	if err == nil {
		err = a.writeTemplate(rec)
	}
	if err != nil {
		log.Error("record template failed", "err", err)
		resp.Ret = fail(cubeletpb.ErrorCode_GrpcError, "node %s: AppSnapshot %s: %v", a.cfg.NodeID, tid, err)
		return resp, nil
	}
	log.Info("run template recorded", "artifact_ids", aids, "dir", a.TemplateDir(tid))
	resp.Ret = ok()
	resp.SandboxID = rec.SandboxID
	resp.TemplateID = tid
	resp.SnapshotPath = a.TemplateDir(tid)
	resp.RootfsSizeBytes = uint64(rootfsBytes)
	return resp, nil
}

// rootfsArtifacts lists the ext4 artifacts the request's containers run
// on: the artifact id annotation of each ext4 image, else its image name.
func rootfsArtifacts(cr *cubeletpb.RunCubeSandboxRequest) ([]string, error) {
	var out []string
	for i, c := range cr.GetContainers() {
		im := c.GetImage()
		if im.GetStorageMedia() != core.StorageMediaExt4 {
			continue
		}
		aid := im.GetAnnotations()[core.AnnotationArtifactID]
		if aid == "" {
			aid = im.GetImage()
		}
		if err := checkName(fmt.Sprintf("containers[%d] artifact id", i), aid); err != nil {
			return nil, err
		}
		if !slices.Contains(out, aid) {
			out = append(out, aid)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no container has an %q rootfs image", core.StorageMediaExt4)
	}
	return out, nil
}

// redactTokens returns a copy of cr without artifact download tokens (the
// annotation and the artifact URL's token query) or registry tokens: the
// record is kept on disk and a token is a credential.
func redactTokens(cr *cubeletpb.RunCubeSandboxRequest) *cubeletpb.RunCubeSandboxRequest {
	c := proto.Clone(cr).(*cubeletpb.RunCubeSandboxRequest)
	hide := func(m map[string]string) {
		for _, k := range []string{core.AnnotationArtifactToken, core.AnnotationImageToken} {
			if _, ok := m[k]; ok {
				m[k] = "REDACTED"
			}
		}
		if raw, ok := m[core.AnnotationArtifactURL]; ok {
			if u, err := url.Parse(raw); err == nil && u.Query().Get("token") != "" {
				q := u.Query()
				q.Set("token", "REDACTED")
				u.RawQuery = q.Encode()
				m[core.AnnotationArtifactURL] = u.String()
			}
		}
	}
	hide(c.GetAnnotations())
	for _, ct := range c.GetContainers() {
		hide(ct.GetImage().GetAnnotations())
		hide(ct.GetAnnotations())
	}
	return c
}

func (a *Agent) writeTemplate(rec TemplateRecord) error {
	dir := a.TemplateDir(rec.TemplateID)
	if err := a.mkdirs(dir); err != nil {
		return err
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	return a.writeFileAtomic(filepath.Join(dir, TemplateFile), append(b, '\n'))
}

// ReadTemplate returns the record AppSnapshot wrote for templateID.
func (a *Agent) ReadTemplate(templateID string) (*TemplateRecord, error) {
	if err := checkName("template id", templateID); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(a.TemplateDir(templateID), TemplateFile))
	if err != nil {
		return nil, err
	}
	var rec TemplateRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("template %s: %w", templateID, err)
	}
	return &rec, nil
}

// CleanupTemplate removes <data>/templates/<templateID>. A missing template
// is success. The snapshotPath of the request is never deleted as such: a
// path from the network is only compared with the agent's own.
func (s cubeboxServer) CleanupTemplate(ctx context.Context, req *cubeletpb.CleanupTemplateRequest) (*cubeletpb.CleanupTemplateResponse, error) {
	a := s.a
	tid := req.GetTemplateID()
	resp := &cubeletpb.CleanupTemplateResponse{RequestID: req.GetRequestID(), TemplateID: tid}
	log := a.log.With("rpc", "CleanupTemplate", "request_id", req.GetRequestID(), "template_id", tid)
	if err := checkName("template id", tid); err != nil {
		log.Warn("bad request", "err", err)
		resp.Ret = fail(cubeletpb.ErrorCode_InvalidParamFormat, "node %s: CleanupTemplate: %v", a.cfg.NodeID, err)
		return resp, nil
	}
	dir := a.TemplateDir(tid)
	if p := req.GetSnapshotPath(); p != "" && filepath.Clean(p) != dir {
		log.Warn("ignoring snapshot path that is not this agent's template dir", "snapshot_path", p, "dir", dir)
	}
	unlock, err := a.locks.lock(ctx, "template/"+tid)
	if err != nil {
		log.Warn("cleanup abandoned", "err", err)
		resp.Ret = fail(cubeletpb.ErrorCode_GrpcError, "node %s: CleanupTemplate %s: %v", a.cfg.NodeID, tid, err)
		return resp, nil
	}
	defer unlock()
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		log.Info("template not present, nothing to remove")
		resp.Ret = &cubeletpb.Ret{RetCode: cubeletpb.ErrorCode_Success, RetMsg: "template not found on node, nothing to remove"}
		return resp, nil
	}
	if err := os.RemoveAll(dir); err != nil {
		log.Error("cleanup failed", "err", err)
		resp.Ret = fail(cubeletpb.ErrorCode_GrpcError, "node %s: CleanupTemplate %s: %v", a.cfg.NodeID, tid, err)
		return resp, nil
	}
	log.Info("template removed", "dir", dir)
	resp.Ret = ok()
	return resp, nil
}
