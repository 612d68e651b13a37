-- 0008_placement: the placement policy set through the API and the placement controller's decisions (sqlite).
-- Generated from the ent schema with internal/tools/migrationgen, then laid out one column per line
-- (ent's PRAGMA foreign_keys lines are left out: the tables have no foreign keys).
-- Never edit an applied migration: add the next NNNN_name.sql instead (the checksum is recorded).
CREATE TABLE `t_cube_placement_decision` (
  `id` integer NOT NULL PRIMARY KEY AUTOINCREMENT,
  `template_id` text NOT NULL,
  `node_id` text NOT NULL DEFAULT (''),
  `decision` text NOT NULL DEFAULT (''),
  `reason` text NOT NULL DEFAULT (''),
  `message` text NOT NULL DEFAULT (''),
  `job_id` text NOT NULL DEFAULT (''),
  `master` text NOT NULL DEFAULT (''),
  `created_at` datetime NOT NULL
);
CREATE INDEX `idx_placement_decision_template` ON `t_cube_placement_decision` (`template_id`);
CREATE TABLE `t_cube_placement_policy` (
  `id` integer NOT NULL PRIMARY KEY AUTOINCREMENT,
  `name` text NOT NULL,
  `doc` text NULL,
  `updated_at` datetime NOT NULL
);
CREATE UNIQUE INDEX `idx_placement_policy_name` ON `t_cube_placement_policy` (`name`);
