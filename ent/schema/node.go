package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// TemplateNode is t_cube_template_node: a node registered in the database,
// merged by the node directory with the statically configured list. A row
// adds a node or overrides its addresses; disabled takes it out.
type TemplateNode struct {
	ent.Schema
}

// Annotations of the schema.
func (TemplateNode) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "t_cube_template_node", Charset: "utf8mb4", Collation: mysqlBin}}
}

// Fields of the schema. The table has no deleted_at: rows are this
// service's own, not an upstream table, and are deleted for real.
func (TemplateNode) Fields() []ent.Field {
	return []ent.Field{
		field.String("node_id").MaxLen(128).NotEmpty().Immutable(),
		str("node_ip", 64),
		str("grpc_addr", 255),
		str("instance_type", 64),
		field.Bool("disabled").Default(false),
		field.Time("created_at").Immutable().SchemaType(timeType),
		field.Time("updated_at").SchemaType(timeType),
	}
}

// Indexes of the schema.
func (TemplateNode) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("node_id").Unique().StorageKey("idx_template_node_id"),
	}
}
