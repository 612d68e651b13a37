package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// PlacementPolicy is t_cube_placement_policy: the placement policy set
// through the API (one row, name "default"), shared by every master.
type PlacementPolicy struct {
	ent.Schema
}

// Annotations of the schema.
func (PlacementPolicy) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "t_cube_placement_policy", Charset: "utf8mb4", Collation: mysqlBin}}
}

// Fields of the schema.
func (PlacementPolicy) Fields() []ent.Field {
	return []ent.Field{
		field.String("name").MaxLen(64).NotEmpty().Immutable(),
		medium("doc"),
		field.Time("updated_at").SchemaType(timeType),
	}
}

// Indexes of the schema.
func (PlacementPolicy) Indexes() []ent.Index {
	return []ent.Index{index.Fields("name").Unique().StorageKey("idx_placement_policy_name")}
}

// PlacementDecision is t_cube_placement_decision: the placement
// controller's recent decisions, a bounded number per template.
type PlacementDecision struct {
	ent.Schema
}

// Annotations of the schema.
func (PlacementDecision) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "t_cube_placement_decision", Charset: "utf8mb4", Collation: mysqlBin}}
}

// Fields of the schema.
func (PlacementDecision) Fields() []ent.Field {
	return []ent.Field{
		field.String("template_id").MaxLen(128).NotEmpty().Immutable(),
		str("node_id", 128),
		str("decision", 32),
		str("reason", 64),
		str("message", 1024),
		str("job_id", 128),
		str("master", 128),
		field.Time("created_at").Immutable().SchemaType(timeType),
	}
}

// Indexes of the schema.
func (PlacementDecision) Indexes() []ent.Index {
	return []ent.Index{index.Fields("template_id").StorageKey("idx_placement_decision_template")}
}
