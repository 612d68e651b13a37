-- 0008_placement: the placement policy set through the API and the placement controller's decisions (mysql).
-- Generated from the ent schema with internal/tools/migrationgen, then laid out one column per line.
-- Never edit an applied migration: add the next NNNN_name.sql instead (the checksum is recorded).
CREATE TABLE `t_cube_placement_decision` (
  `id` bigint NOT NULL AUTO_INCREMENT,
  `template_id` varchar(128) NOT NULL,
  `node_id` varchar(128) NOT NULL DEFAULT '',
  `decision` varchar(32) NOT NULL DEFAULT '',
  `reason` varchar(64) NOT NULL DEFAULT '',
  `message` varchar(1024) NOT NULL DEFAULT '',
  `job_id` varchar(128) NOT NULL DEFAULT '',
  `master` varchar(128) NOT NULL DEFAULT '',
  `created_at` datetime(6) NOT NULL,
  PRIMARY KEY (`id`),
  INDEX `idx_placement_decision_template` (`template_id`)
) CHARSET utf8mb4 COLLATE utf8mb4_bin;
CREATE TABLE `t_cube_placement_policy` (
  `id` bigint NOT NULL AUTO_INCREMENT,
  `name` varchar(64) NOT NULL,
  `doc` mediumtext NULL,
  `updated_at` datetime(6) NOT NULL,
  PRIMARY KEY (`id`),
  UNIQUE INDEX `idx_placement_policy_name` (`name`)
) CHARSET utf8mb4 COLLATE utf8mb4_bin;
