package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/mixin"
)

// mysqlBin is a MySQL column collation that compares byte for byte, so that
// keys such as aliases "Foo" and "foo" never collide. PostgreSQL and SQLite
// compare text bytewise by default.
const mysqlBin = "utf8mb4_bin"

// timeType keeps microseconds: updated_at is the compare-and-set guard of job
// updates, so two writes in the same second must be told apart. PostgreSQL's
// timestamptz already has microseconds; SQLite stores text.
var timeType = map[string]string{dialect.MySQL: "datetime(6)"}

// mediumText is upstream's column type for JSON payloads.
var mediumText = map[string]string{dialect.MySQL: "mediumtext"}

// GormModel holds the gorm.Model columns every upstream row has (the id is
// ent's auto-increment primary key). deleted_at is kept for compatibility
// with upstream readers; this service deletes rows for real.
type GormModel struct {
	mixin.Schema
}

// Fields of the mixin.
func (GormModel) Fields() []ent.Field {
	return []ent.Field{
		field.Time("created_at").Immutable().SchemaType(timeType),
		field.Time("updated_at").SchemaType(timeType),
		field.Time("deleted_at").Optional().Nillable().SchemaType(timeType),
	}
}

// str is a NOT NULL varchar of size n with an empty default, the shape of
// most upstream columns.
func str(name string, n int) ent.Field {
	return field.String(name).MaxLen(n).Default("")
}

// text is a nullable text column (NULL reads as ""). Text columns carry no
// default because MySQL before 8.0.13 refuses defaults on TEXT/BLOB.
func text(name string) ent.Field {
	return field.Text(name).Optional()
}

// medium is a nullable mediumtext (MySQL) column.
func medium(name string) ent.Field {
	return field.Text(name).Optional().SchemaType(mediumText)
}
