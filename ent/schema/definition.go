package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// TemplateDefinition is t_cube_template_definition: one row per template.
type TemplateDefinition struct {
	ent.Schema
}

// Annotations of the schema.
func (TemplateDefinition) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "t_cube_template_definition", Charset: "utf8mb4", Collation: mysqlBin}}
}

// Mixin of the schema.
func (TemplateDefinition) Mixin() []ent.Mixin { return []ent.Mixin{GormModel{}} }

// Fields of the schema.
func (TemplateDefinition) Fields() []ent.Field {
	return []ent.Field{
		field.String("template_id").MaxLen(128).NotEmpty().Immutable(),
		str("instance_type", 64),
		str("version", 32),
		str("status", 32),
		// NOT NULL like upstream; every create writes it.
		field.Text("request_json").SchemaType(mediumText),
		text("last_error"),
		// alias is NULL when unset; the unique index allows many NULLs.
		field.String("alias").MaxLen(64).Optional().Nillable(),
		str("rootfs_artifact_id", 128),
		// Columns of the newer upstream schema, kept so both can share a
		// database; this service writes their defaults.
		// "template" (upstream's default) or "snapshot".
		field.String("kind").MaxLen(32).Default("template"),
		str("origin_sandbox_id", 128),
		str("origin_node_id", 128),
		str("display_name", 256),
		str("storage_backend", 32),
		// Upstream's retain is not modeled: its newest release dropped
		// the column, and databases that still have it give it a default.
		field.Int64("rootfs_size_bytes_at_snapshot").Default(0),
	}
}

// Indexes of the schema.
func (TemplateDefinition) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("template_id").Unique().StorageKey("idx_template_id"),
		index.Fields("alias").Unique().StorageKey("idx_template_alias"),
		index.Fields("status").StorageKey("idx_status"),
		index.Fields("rootfs_artifact_id").StorageKey("idx_definition_rootfs_artifact"),
		// Upstream's indexes, so its master finds what it looks for.
		index.Fields("kind", "status").StorageKey("idx_template_kind_status"),
		index.Fields("origin_sandbox_id").StorageKey("idx_snapshot_origin_sandbox"),
		index.Fields("origin_node_id").StorageKey("idx_snapshot_origin_node"),
		index.Fields("storage_backend").StorageKey("idx_template_storage_backend"),
	}
}
