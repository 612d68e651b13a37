package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// TemplateImageJob is t_cube_template_image_job: one attempt at producing or
// migrating a template.
type TemplateImageJob struct {
	ent.Schema
}

// Annotations of the schema.
func (TemplateImageJob) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "t_cube_template_image_job", Charset: "utf8mb4", Collation: mysqlBin}}
}

// Mixin of the schema.
func (TemplateImageJob) Mixin() []ent.Mixin { return []ent.Mixin{GormModel{}} }

// Fields of the schema.
func (TemplateImageJob) Fields() []ent.Field {
	return []ent.Field{
		field.String("job_id").MaxLen(128).NotEmpty().Immutable(),
		field.String("template_id").MaxLen(128).NotEmpty().Immutable(),
		field.Int("attempt_no").Default(1),
		str("retry_of_job_id", 128),
		str("operation", 32),
		str("redo_mode", 32),
		medium("redo_scope_json"),
		str("resume_phase", 64),
		// Cleanup locators of commit jobs (upstream); unused by this service.
		str("node_id", 128),
		// As wide as upstream's column.
		str("node_ip", 256),
		str("snapshot_path", 1024),
		str("artifact_id", 128),
		str("template_spec_fingerprint", 128),
		str("source_image_ref", 1024),
		str("source_image_digest", 256),
		str("writable_layer_size", 64),
		str("instance_type", 64),
		str("network_type", 64),
		str("status", 32),
		str("phase", 64),
		field.Int("progress").Default(0),
		text("error_message"),
		field.Int("expected_node_count").Default(0),
		field.Int("ready_node_count").Default(0),
		field.Int("failed_node_count").Default(0),
		str("template_status", 32),
		str("artifact_status", 32),
		medium("request_json"),
		medium("result_json"),
		// Columns of the newer upstream schema.
		str("request_id", 128),
		str("sandbox_id", 128),
		str("resource_type", 32),
		str("resource_id", 128),
		field.Int64("pull_total_bytes").Default(0),
		field.Int64("pull_downloaded_bytes").Default(0),
		field.Int("pull_total_layers").Default(0),
		field.Int("pull_completed_layers").Default(0),
		field.Int64("pull_speed_bps").Default(0),
		// active_key is non-NULL exactly while the job is active. Its unique
		// index (many NULLs allowed) is what enforces invariant I1: at most
		// one active job per key, decided by the database, not by a lock.
		field.String("active_key").MaxLen(191).Optional().Nillable(),
		// registry_auth holds the registry credentials of the job's request,
		// sealed (encrypted and authenticated) by the control plane, so a
		// redo can rebuild a private image; never shown, never logged.
		text("registry_auth"),
		// The job's run number (core.Job.Fence); this service's own.
		field.Int64("fence").Default(0),
		// The data-plane process that runs the job's build
		// (core.Job.BuildOwner), and how long each finished phase took
		// (core.Job.PhaseDurations, JSON); this service's own.
		str("build_owner", 128),
		text("phase_durations_json"),
	}
}

// Indexes of the schema.
func (TemplateImageJob) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("job_id").Unique().StorageKey("idx_template_image_job_id"),
		index.Fields("template_id", "attempt_no").Unique().StorageKey("idx_template_image_template_attempt"),
		index.Fields("template_id", "status").StorageKey("idx_template_image_template_status"),
		index.Fields("status", "updated_at").StorageKey("idx_template_image_status"),
		index.Fields("active_key").Unique().StorageKey("idx_template_image_active_key"),
		index.Fields("artifact_id").StorageKey("idx_template_image_artifact"),
		// Upstream's indexes. A request id names one job per operation.
		index.Fields("request_id", "operation").Unique().StorageKey("idx_template_image_request_operation"),
		index.Fields("sandbox_id", "status").StorageKey("idx_template_image_sandbox_status"),
		index.Fields("resource_id", "status").StorageKey("idx_template_image_resource_status"),
	}
}
