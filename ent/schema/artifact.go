package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// RootfsArtifact is t_cube_rootfs_artifact: one ext4 per template spec
// fingerprint.
type RootfsArtifact struct {
	ent.Schema
}

// Annotations of the schema.
func (RootfsArtifact) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "t_cube_rootfs_artifact", Charset: "utf8mb4", Collation: mysqlBin}}
}

// Mixin of the schema.
func (RootfsArtifact) Mixin() []ent.Mixin { return []ent.Mixin{GormModel{}} }

// Fields of the schema.
func (RootfsArtifact) Fields() []ent.Field {
	return []ent.Field{
		field.String("artifact_id").MaxLen(128).NotEmpty().Immutable(),
		field.String("template_spec_fingerprint").MaxLen(128).NotEmpty(),
		str("source_image_ref", 1024),
		str("source_image_digest", 256),
		str("master_node_id", 128),
		// master_node_ip is misnamed upstream: it holds the download base URL.
		str("master_node_ip", 256),
		str("ext4_path", 2048),
		str("ext4_sha256", 128),
		field.Int64("ext4_size_bytes").Default(0),
		medium("image_config_json"),
		medium("generated_request_json"),
		str("writable_layer_size", 64),
		str("download_token", 256),
		str("status", 32),
		text("last_error"),
		field.Int64("gc_deadline").Default(0),
		// Columns of the newer upstream schema.
		text("artifact_url"),
		str("storage_backend", 32),
		str("object_key", 1024),
		str("build_owner_token", 128),
		field.Int64("build_generation").Default(0),
		field.Int64("build_lease_expire_at").Default(0),
		field.Bool("cube_egress_ca_baked").Default(false),
		str("cube_egress_ca_fingerprint", 128),
		// Upstream's type: a count of the files the CA was written to.
		field.Int64("cube_egress_ca_targets_written").Default(0),
		// Ours: the Format of the builder that wrote the bytes
		// (ports.RootfsBuilder), NULL where unknown (rows written before
		// it was recorded, or by upstream). Text: a plugin's Format has
		// no length limit.
		text("builder_format"),
	}
}

// Indexes of the schema.
func (RootfsArtifact) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("artifact_id").Unique().StorageKey("idx_artifact_id"),
		index.Fields("template_spec_fingerprint").Unique().StorageKey("idx_artifact_fingerprint"),
		index.Fields("status", "updated_at").StorageKey("idx_artifact_status"),
	}
}
