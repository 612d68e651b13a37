package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// TemplateName is t_cube_template_name: the one namespace template ids and
// aliases share. A sandbox names its template by id or alias; the unique key
// on name makes the database refuse a new id that is someone's alias, or an
// alias that is someone's id or alias, so a name always means one template.
type TemplateName struct {
	ent.Schema
}

// Annotations of the schema.
func (TemplateName) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "t_cube_template_name", Charset: "utf8mb4", Collation: mysqlBin}}
}

// Fields of the schema. Rows are this service's own (no upstream table)
// and are deleted for real.
func (TemplateName) Fields() []ent.Field {
	return []ent.Field{
		field.String("name").MaxLen(128).NotEmpty().Immutable(),
		field.String("template_id").MaxLen(128).NotEmpty().Immutable(),
		// kind is "id" or "alias".
		field.String("kind").MaxLen(16).NotEmpty(),
		field.Time("created_at").Immutable().SchemaType(timeType),
		// previous_template_id is the template an alias was moved away
		// from ("" for a name claimed, not moved), so a move can be
		// rolled back; created_at is then the time of the move.
		field.String("previous_template_id").MaxLen(128).Default(""),
	}
}

// Indexes of the schema.
func (TemplateName) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("name").Unique().StorageKey("idx_template_name"),
		index.Fields("template_id").StorageKey("idx_template_name_template"),
	}
}
