package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// JobLogLine is t_cube_template_job_log: the lines the services logged
// about a job (ports.JobLog), so a build's page shows them from any master
// replica and after a restart. This service's own table; rows are bounded
// per job by the adapter and deleted for real.
type JobLogLine struct {
	ent.Schema
}

// Annotations of the schema.
func (JobLogLine) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "t_cube_template_job_log", Charset: "utf8mb4", Collation: mysqlBin}}
}

// Fields of the schema. The auto-increment id orders a job's lines.
func (JobLogLine) Fields() []ent.Field {
	return []ent.Field{
		field.String("job_id").MaxLen(128).NotEmpty().Immutable(),
		field.Time("logged_at").Immutable().SchemaType(timeType),
		field.String("level").MaxLen(16).Default("").Immutable(),
		field.String("source").MaxLen(128).Default("").Immutable(),
		field.Text("message").Immutable(),
	}
}

// Indexes of the schema.
func (JobLogLine) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("job_id").StorageKey("idx_job_log_job"),
		index.Fields("logged_at").StorageKey("idx_job_log_time"),
	}
}
