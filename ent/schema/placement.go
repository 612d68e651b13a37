package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// ArtifactNodePlacement is t_cube_artifact_node_placement: a node that holds
// (or held) a copy of an artifact. Upstream's composite primary key
// (artifact_id, node_id) is kept as a unique index next to ent's id.
type ArtifactNodePlacement struct {
	ent.Schema
}

// Annotations of the schema.
func (ArtifactNodePlacement) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "t_cube_artifact_node_placement", Charset: "utf8mb4", Collation: mysqlBin}}
}

// Mixin of the schema.
func (ArtifactNodePlacement) Mixin() []ent.Mixin { return []ent.Mixin{GormModel{}} }

// Fields of the schema.
func (ArtifactNodePlacement) Fields() []ent.Field {
	return []ent.Field{
		field.String("artifact_id").MaxLen(128).NotEmpty().Immutable(),
		field.String("node_id").MaxLen(128).NotEmpty().Immutable(),
		str("node_ip", 64),
	}
}

// Indexes of the schema.
func (ArtifactNodePlacement) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("artifact_id", "node_id").Unique().StorageKey("idx_placement_artifact_node"),
	}
}
