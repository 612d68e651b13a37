// Package schema holds the ent schemas of the upstream template tables
// (t_cube_template_definition, t_cube_template_replica,
// t_cube_rootfs_artifact, t_cube_template_image_job,
// t_cube_artifact_node_placement) plus what this service adds: the job's
// active_key column whose unique index enforces invariant I1.
//
// The committed SQL migrations in ent/migrate/migrations must match these
// schemas; a drift test in adapters/store/entstore fails when they diverge.
package schema
