-- 0003_template_names_and_registry_auth: the one namespace of template ids and aliases, and the
-- sealed registry credentials a redo rebuilds with (mysql).
-- Generated from the ent schema with ent/cmd/migrationgen, then the backfill added by hand: every
-- template id and alias already in use gets its name; where an old alias equals another template's
-- id, the id wins (it is inserted first and the alias is skipped), as template resolution already
-- tried ids before aliases.
-- Never edit an applied migration: add the next NNNN_name.sql instead (the checksum is recorded).
ALTER TABLE `t_cube_template_image_job` ADD COLUMN `registry_auth` longtext NULL;
CREATE TABLE `t_cube_template_name` (`id` bigint NOT NULL AUTO_INCREMENT, `name` varchar(128) NOT NULL, `template_id` varchar(128) NOT NULL, `kind` varchar(16) NOT NULL, `created_at` datetime(6) NOT NULL, PRIMARY KEY (`id`), UNIQUE INDEX `idx_template_name` (`name`), INDEX `idx_template_name_template` (`template_id`)) CHARSET utf8mb4 COLLATE utf8mb4_bin;
INSERT IGNORE INTO t_cube_template_name (name, template_id, kind, created_at)
  SELECT template_id, template_id, 'id', created_at FROM t_cube_template_definition WHERE deleted_at IS NULL;
INSERT IGNORE INTO t_cube_template_name (name, template_id, kind, created_at)
  SELECT template_id, template_id, 'id', MIN(created_at) FROM t_cube_template_image_job WHERE deleted_at IS NULL GROUP BY template_id;
INSERT IGNORE INTO t_cube_template_name (name, template_id, kind, created_at)
  SELECT alias, template_id, 'alias', created_at FROM t_cube_template_definition
  WHERE deleted_at IS NULL AND alias IS NOT NULL AND alias <> '';
