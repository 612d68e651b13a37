package entstore

import (
	"encoding/json"
	"fmt"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ent"
)

// Rows become core values here and nowhere else. Stored statuses, phases and
// operations are validated: a row this service cannot interpret is an error,
// not a silently wrong value.

func jobFromEnt(e *ent.TemplateImageJob) (*core.Job, error) {
	bad := func(err error) (*core.Job, error) {
		return nil, fmt.Errorf("job %s: stored row: %w", e.JobID, err)
	}
	status, err := core.ParseJobStatus(e.Status)
	if err != nil {
		return bad(err)
	}
	phase, err := core.ParsePhase(e.Phase)
	if err != nil {
		return bad(err)
	}
	resume, err := core.ParsePhase(e.ResumePhase)
	if err != nil {
		return bad(err)
	}
	op, err := core.ParseOperation(e.Operation)
	if err != nil {
		return bad(err)
	}
	var scope []string
	if e.RedoScopeJSON != "" && e.RedoScopeJSON != "null" {
		if err := json.Unmarshal([]byte(e.RedoScopeJSON), &scope); err != nil {
			return bad(fmt.Errorf("redo_scope_json: %w", err))
		}
	}
	j := &core.Job{
		JobID:             e.JobID,
		TemplateID:        e.TemplateID,
		AttemptNo:         e.AttemptNo,
		RetryOfJobID:      e.RetryOfJobID,
		Operation:         op,
		RedoMode:          core.RedoMode(e.RedoMode),
		RedoScope:         scope,
		ResumePhase:       resume,
		ArtifactID:        e.ArtifactID,
		Fingerprint:       e.TemplateSpecFingerprint,
		SourceImageRef:    e.SourceImageRef,
		SourceImageDigest: e.SourceImageDigest,
		WritableLayerSize: e.WritableLayerSize,
		InstanceType:      e.InstanceType,
		NetworkType:       e.NetworkType,
		Status:            status,
		Phase:             phase,
		Progress:          e.Progress,
		ErrorMessage:      e.ErrorMessage,
		ExpectedNodeCount: e.ExpectedNodeCount,
		ReadyNodeCount:    e.ReadyNodeCount,
		FailedNodeCount:   e.FailedNodeCount,
		TemplateStatus:    e.TemplateStatus,
		ArtifactStatus:    e.ArtifactStatus,
		RequestJSON:       e.RequestJSON,
		ResultJSON:        e.ResultJSON,
		Pull: core.PullProgress{
			TotalBytes:      e.PullTotalBytes,
			DownloadedBytes: e.PullDownloadedBytes,
			TotalLayers:     e.PullTotalLayers,
			CompletedLayers: e.PullCompletedLayers,
			SpeedBPS:        e.PullSpeedBps,
		},
		CreatedAt: e.CreatedAt.UTC(),
		UpdatedAt: e.UpdatedAt.UTC(),
	}
	if e.ActiveKey != nil {
		j.ActiveKey = *e.ActiveKey
	}
	j.RegistryAuth = e.RegistryAuth
	j.Fence = e.Fence
	j.RequestID = e.RequestID
	j.BuildOwner = e.BuildOwner
	if e.PhaseDurationsJSON != "" {
		// Unreadable durations are display data: the job is still usable.
		_ = json.Unmarshal([]byte(e.PhaseDurationsJSON), &j.PhaseDurations)
	}
	return j, nil
}

// setJob writes the mutable columns of j. forUpdate clears active_key when
// j has none (a create simply leaves it NULL).
func setJob(m *ent.TemplateImageJobMutation, j *core.Job, forUpdate bool) error {
	scope := ""
	if len(j.RedoScope) > 0 {
		b, err := json.Marshal(j.RedoScope)
		if err != nil {
			return fmt.Errorf("job %s: redo scope: %w", j.JobID, err)
		}
		scope = string(b)
	}
	m.SetUpdatedAt(j.UpdatedAt)
	m.SetAttemptNo(j.AttemptNo)
	m.SetRetryOfJobID(j.RetryOfJobID)
	m.SetOperation(string(j.Operation))
	m.SetRedoMode(string(j.RedoMode))
	m.SetRedoScopeJSON(scope)
	m.SetResumePhase(string(j.ResumePhase))
	m.SetArtifactID(j.ArtifactID)
	m.SetTemplateSpecFingerprint(j.Fingerprint)
	m.SetSourceImageRef(j.SourceImageRef)
	m.SetSourceImageDigest(j.SourceImageDigest)
	m.SetWritableLayerSize(j.WritableLayerSize)
	m.SetInstanceType(j.InstanceType)
	m.SetNetworkType(j.NetworkType)
	m.SetStatus(string(j.Status))
	m.SetPhase(string(j.Phase))
	m.SetProgress(j.Progress)
	m.SetErrorMessage(j.ErrorMessage)
	m.SetExpectedNodeCount(j.ExpectedNodeCount)
	m.SetReadyNodeCount(j.ReadyNodeCount)
	m.SetFailedNodeCount(j.FailedNodeCount)
	m.SetTemplateStatus(j.TemplateStatus)
	m.SetArtifactStatus(j.ArtifactStatus)
	m.SetRequestJSON(j.RequestJSON)
	m.SetResultJSON(j.ResultJSON)
	m.SetPullTotalBytes(j.Pull.TotalBytes)
	m.SetPullDownloadedBytes(j.Pull.DownloadedBytes)
	m.SetPullTotalLayers(j.Pull.TotalLayers)
	m.SetPullCompletedLayers(j.Pull.CompletedLayers)
	m.SetPullSpeedBps(j.Pull.SpeedBPS)
	m.SetRegistryAuth(j.RegistryAuth)
	m.SetFence(j.Fence)
	m.SetRequestID(j.RequestID)
	m.SetBuildOwner(j.BuildOwner)
	durations := ""
	if len(j.PhaseDurations) > 0 {
		b, err := json.Marshal(j.PhaseDurations)
		if err != nil {
			return fmt.Errorf("job %s: phase durations: %w", j.JobID, err)
		}
		durations = string(b)
	}
	m.SetPhaseDurationsJSON(durations)
	switch {
	case j.ActiveKey != "":
		m.SetActiveKey(j.ActiveKey)
	case forUpdate:
		m.ClearActiveKey()
	}
	return nil
}

func definitionFromEnt(e *ent.TemplateDefinition) *core.Definition {
	d := &core.Definition{
		TemplateID:       e.TemplateID,
		InstanceType:     e.InstanceType,
		Version:          e.Version,
		Status:           core.TemplateStatus(e.Status),
		RequestJSON:      e.RequestJSON,
		LastError:        e.LastError,
		RootfsArtifactID: e.RootfsArtifactID,
		CreatedAt:        e.CreatedAt.UTC(),
		UpdatedAt:        e.UpdatedAt.UTC(),
	}
	switch {
	case e.Alias != nil:
		d.Alias = *e.Alias
	case e.Kind == kindTemplate && e.DisplayName != "":
		// A template aliased by an upstream master, which keeps the alias
		// in display_name only.
		d.Alias = e.DisplayName
	}
	return d
}

// kindTemplate is upstream's definition kind of templates (the other is
// "snapshot", whose display_name is a label, not an alias).
const kindTemplate = "template"

func setDefinition(m *ent.TemplateDefinitionMutation, d *core.Definition, forUpdate bool) {
	m.SetUpdatedAt(d.UpdatedAt)
	m.SetInstanceType(d.InstanceType)
	m.SetVersion(d.Version)
	m.SetStatus(string(d.Status))
	m.SetRequestJSON(d.RequestJSON)
	m.SetLastError(d.LastError)
	m.SetRootfsArtifactID(d.RootfsArtifactID)
	// The alias is kept where upstream's master reads it too.
	switch {
	case d.Alias != "":
		m.SetAlias(d.Alias)
		m.SetDisplayName(d.Alias)
	case forUpdate:
		m.ClearAlias()
		m.SetDisplayName("")
	}
}

func replicaFromEnt(e *ent.TemplateReplica) *core.Replica {
	return &core.Replica{
		TemplateID:        e.TemplateID,
		NodeID:            e.NodeID,
		NodeIP:            e.NodeIP,
		InstanceType:      e.InstanceType,
		Spec:              e.Spec,
		SnapshotPath:      e.SnapshotPath,
		Status:            core.ReplicaStatus(e.Status),
		Phase:             core.ReplicaPhase(e.Phase),
		ArtifactID:        e.ArtifactID,
		LastJobID:         e.LastJobID,
		LastErrorPhase:    e.LastErrorPhase,
		CleanupRequired:   e.CleanupRequired,
		ErrorMessage:      e.ErrorMessage,
		GuestImageVersion: e.GuestImageVersion,
		AgentVersion:      e.AgentVersion,
		KernelVersion:     e.KernelVersion,
		ShimVersion:       e.ShimVersion,
		CompatStatus:      core.CompatStatus(e.CompatStatus),
		CompatCheckedUnix: e.CompatCheckedUnix,
		CreatedAt:         e.CreatedAt.UTC(),
		UpdatedAt:         e.UpdatedAt.UTC(),
	}
}

func artifactFromEnt(e *ent.RootfsArtifact) (*core.Artifact, error) {
	st, err := core.ParseArtifactStatus(e.Status)
	if err != nil {
		return nil, fmt.Errorf("artifact %s: stored row: %w", e.ArtifactID, err)
	}
	return &core.Artifact{
		ArtifactID:                 e.ArtifactID,
		Fingerprint:                e.TemplateSpecFingerprint,
		SourceImageRef:             e.SourceImageRef,
		SourceImageDigest:          e.SourceImageDigest,
		MasterNodeID:               e.MasterNodeID,
		DownloadBaseURL:            e.MasterNodeIP,
		Ext4Path:                   e.Ext4Path,
		Ext4SHA256:                 e.Ext4Sha256,
		Ext4SizeBytes:              e.Ext4SizeBytes,
		ImageConfigJSON:            e.ImageConfigJSON,
		GeneratedRequestJSON:       e.GeneratedRequestJSON,
		WritableLayerSize:          e.WritableLayerSize,
		DownloadToken:              e.DownloadToken,
		Status:                     st,
		LastError:                  e.LastError,
		GCDeadline:                 e.GcDeadline,
		StorageBackend:             e.StorageBackend,
		ObjectKey:                  e.ObjectKey,
		BuildOwnerToken:            e.BuildOwnerToken,
		CubeEgressCABaked:          e.CubeEgressCaBaked,
		CubeEgressCAFingerprint:    e.CubeEgressCaFingerprint,
		CubeEgressCATargetsWritten: e.CubeEgressCaTargetsWritten,
		Builder:                    e.BuilderFormat,
		CreatedAt:                  e.CreatedAt.UTC(),
		UpdatedAt:                  e.UpdatedAt.UTC(),
	}, nil
}

func setArtifact(m *ent.RootfsArtifactMutation, a *core.Artifact) {
	m.SetUpdatedAt(a.UpdatedAt)
	m.SetTemplateSpecFingerprint(a.Fingerprint)
	m.SetSourceImageRef(a.SourceImageRef)
	m.SetSourceImageDigest(a.SourceImageDigest)
	m.SetMasterNodeID(a.MasterNodeID)
	m.SetMasterNodeIP(a.DownloadBaseURL)
	m.SetExt4Path(a.Ext4Path)
	m.SetExt4Sha256(a.Ext4SHA256)
	m.SetExt4SizeBytes(a.Ext4SizeBytes)
	m.SetImageConfigJSON(a.ImageConfigJSON)
	m.SetGeneratedRequestJSON(a.GeneratedRequestJSON)
	m.SetWritableLayerSize(a.WritableLayerSize)
	m.SetDownloadToken(a.DownloadToken)
	m.SetStatus(string(a.Status))
	m.SetLastError(a.LastError)
	m.SetGcDeadline(a.GCDeadline)
	m.SetStorageBackend(a.StorageBackend)
	m.SetObjectKey(a.ObjectKey)
	m.SetBuildOwnerToken(a.BuildOwnerToken)
	m.SetCubeEgressCaBaked(a.CubeEgressCABaked)
	m.SetCubeEgressCaFingerprint(a.CubeEgressCAFingerprint)
	m.SetCubeEgressCaTargetsWritten(a.CubeEgressCATargetsWritten)
	m.SetBuilderFormat(a.Builder)
}
