package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// TemplateReplica is t_cube_template_replica: a template on one node.
type TemplateReplica struct {
	ent.Schema
}

// Annotations of the schema.
func (TemplateReplica) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "t_cube_template_replica", Charset: "utf8mb4", Collation: mysqlBin}}
}

// Mixin of the schema.
func (TemplateReplica) Mixin() []ent.Mixin { return []ent.Mixin{GormModel{}} }

// Fields of the schema.
func (TemplateReplica) Fields() []ent.Field {
	return []ent.Field{
		field.String("template_id").MaxLen(128).NotEmpty().Immutable(),
		field.String("node_id").MaxLen(128).NotEmpty().Immutable(),
		// As wide as upstream's column.
		str("node_ip", 256),
		str("instance_type", 64),
		str("spec", 128),
		str("snapshot_path", 1024),
		str("status", 32),
		str("phase", 32),
		str("artifact_id", 128),
		str("last_job_id", 128),
		str("last_error_phase", 64),
		field.Bool("cleanup_required").Default(false),
		text("error_message"),
		// Compatibility columns of the newer upstream schema.
		str("guest_image_version", 64),
		str("agent_version", 64),
		str("kernel_version", 64),
		str("shim_version", 64),
		str("compat_status", 32),
		str("compat_policy", 32),
		field.Int64("compat_checked_unix").Default(0),
	}
}

// Indexes of the schema.
func (TemplateReplica) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("template_id", "node_id").Unique().StorageKey("idx_template_node"),
		index.Fields("template_id", "status").StorageKey("idx_template_status"),
		index.Fields("artifact_id").StorageKey("idx_replica_artifact"),
	}
}
