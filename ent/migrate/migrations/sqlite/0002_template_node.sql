-- 0002_template_node: nodes registered in the database (sqlite).
-- Generated from the ent schema with ent/cmd/migrationgen, then laid out one column per line
-- (ent's PRAGMA foreign_keys lines are left out: the table has no foreign keys, and the
-- pragma is a no-op inside the migrator's transaction anyway).
-- Never edit an applied migration: add the next NNNN_name.sql instead (the checksum is recorded).
CREATE TABLE `t_cube_template_node` (
  `id` integer NOT NULL PRIMARY KEY AUTOINCREMENT,
  `node_id` text NOT NULL,
  `node_ip` text NOT NULL DEFAULT (''),
  `grpc_addr` text NOT NULL DEFAULT (''),
  `instance_type` text NOT NULL DEFAULT (''),
  `disabled` bool NOT NULL DEFAULT (false),
  `created_at` datetime NOT NULL,
  `updated_at` datetime NOT NULL
);
CREATE UNIQUE INDEX `idx_template_node_id` ON `t_cube_template_node` (`node_id`);
