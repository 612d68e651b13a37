// Package ent is the generated ent client of the metadata store. Only the
// adapters/store packages import it; core and ports never see ent types.
//
// Features: sql/upsert for replica and placement upserts, sql/lock for
// SELECT ... FOR UPDATE, sql/execquery for raw statements. The schema itself
// is applied by the committed SQL migrations in migrate/migrations, not by
// ent's auto-migration; a drift test keeps the two in step.
package ent

//go:generate go run -mod=mod entgo.io/ent/cmd/ent generate --feature sql/upsert,sql/lock,sql/execquery,intercept ./schema
