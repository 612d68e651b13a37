-- 0004_upstream_superset: the schema becomes a superset of upstream's newest (mysql).
-- The ent part was generated with ent/cmd/migrationgen; the rest was written by hand:
--   * t_cube_artifact_node_placement takes upstream's shape: primary key (artifact_id, node_id),
--     created_at in unix seconds, no id or soft-delete columns;
--   * job and replica node_ip as wide as upstream's; cube_egress_ca_targets_written an integer;
--   * kind defaults to 'template', and rows without one get it;
--   * the alias is also kept in display_name, behind upstream's generated, case-folded
--     display_name_key and its unique index, where upstream's master reads it;
--   * upstream's indexes; (request_id, operation) is unique, so empty request ids become the
--     job id and repeats get '#<job id>' appended (all but the oldest), as upstream normalizes.
-- Never edit an applied migration: add the next NNNN_name.sql instead (the checksum is recorded).
CREATE TABLE `t_cube_artifact_node_placement_next` (
  `artifact_id` varchar(128) NOT NULL,
  `node_id` varchar(128) NOT NULL,
  `node_ip` varchar(256) NOT NULL DEFAULT '',
  `created_at` bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (`artifact_id`, `node_id`)
) CHARSET utf8mb4 COLLATE utf8mb4_bin;
INSERT INTO `t_cube_artifact_node_placement_next` (`artifact_id`, `node_id`, `node_ip`, `created_at`)
  SELECT `artifact_id`, `node_id`, `node_ip`, UNIX_TIMESTAMP(`created_at`) FROM `t_cube_artifact_node_placement`;
DROP TABLE `t_cube_artifact_node_placement`;
RENAME TABLE `t_cube_artifact_node_placement_next` TO `t_cube_artifact_node_placement`;
UPDATE `t_cube_rootfs_artifact` SET `cube_egress_ca_targets_written` = '0'
  WHERE `cube_egress_ca_targets_written` IS NULL OR `cube_egress_ca_targets_written` NOT REGEXP '^[0-9]{1,18}$';
ALTER TABLE `t_cube_rootfs_artifact` MODIFY COLUMN `cube_egress_ca_targets_written` bigint NOT NULL DEFAULT 0;
UPDATE `t_cube_template_definition` SET `kind` = 'template' WHERE `kind` = '';
UPDATE `t_cube_template_definition` SET `display_name` = `alias` WHERE `alias` IS NOT NULL AND `alias` <> '' AND `kind` = 'template';
ALTER TABLE `t_cube_template_definition` MODIFY COLUMN `kind` varchar(32) NOT NULL DEFAULT 'template', ADD INDEX `idx_template_kind_status` (`kind`, `status`), ADD INDEX `idx_snapshot_origin_sandbox` (`origin_sandbox_id`), ADD INDEX `idx_snapshot_origin_node` (`origin_node_id`), ADD INDEX `idx_template_storage_backend` (`storage_backend`);
ALTER TABLE `t_cube_template_definition` ADD COLUMN `display_name_key` varchar(256) GENERATED ALWAYS AS (IF(`display_name` = '' OR `kind` <> 'template', NULL, LOWER(`display_name`))) VIRTUAL;
ALTER TABLE `t_cube_template_definition` ADD UNIQUE INDEX `idx_template_display_name_key` (`display_name_key`);
UPDATE `t_cube_template_image_job` SET `request_id` = `job_id` WHERE `request_id` = '';
UPDATE `t_cube_template_image_job` t
  JOIN (SELECT MIN(`id`) AS keep_id, `request_id`, `operation` FROM `t_cube_template_image_job`
        GROUP BY `request_id`, `operation` HAVING COUNT(*) > 1) d
    ON d.`request_id` = t.`request_id` AND d.`operation` = t.`operation` AND t.`id` <> d.keep_id
  SET t.`request_id` = CONCAT(LEFT(t.`request_id`, 127 - CHAR_LENGTH(t.`job_id`)), '#', t.`job_id`);
ALTER TABLE `t_cube_template_image_job` MODIFY COLUMN `node_ip` varchar(256) NOT NULL DEFAULT '', ADD UNIQUE INDEX `idx_template_image_request_operation` (`request_id`, `operation`), ADD INDEX `idx_template_image_sandbox_status` (`sandbox_id`, `status`), ADD INDEX `idx_template_image_resource_status` (`resource_id`, `status`);
ALTER TABLE `t_cube_template_replica` MODIFY COLUMN `node_ip` varchar(256) NOT NULL DEFAULT '';
