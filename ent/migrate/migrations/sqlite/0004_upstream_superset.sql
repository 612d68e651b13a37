-- 0004_upstream_superset: the schema becomes a superset of upstream's newest (sqlite).
-- The ent part was generated with ent/cmd/migrationgen (SQLite rebuilds a table to change a
-- column); the rest was written by hand:
--   * t_cube_artifact_node_placement takes upstream's shape: primary key (artifact_id, node_id),
--     created_at in unix seconds, no id or soft-delete columns;
--   * cube_egress_ca_targets_written an integer; kind defaults to 'template', and rows without
--     one get it; the alias is also kept in display_name, behind upstream's generated,
--     case-folded display_name_key and its unique index, where upstream's master reads it;
--   * upstream's indexes; (request_id, operation) is unique, so empty request ids become the
--     job id and repeats get '#<job id>' appended (all but the oldest), as upstream normalizes.
-- Never edit an applied migration: add the next NNNN_name.sql instead (the checksum is recorded).
CREATE TABLE `t_cube_artifact_node_placement_next` (
  `artifact_id` text NOT NULL,
  `node_id` text NOT NULL,
  `node_ip` text NOT NULL DEFAULT (''),
  `created_at` integer NOT NULL DEFAULT (0),
  PRIMARY KEY (`artifact_id`, `node_id`)
);
INSERT INTO `t_cube_artifact_node_placement_next` (`artifact_id`, `node_id`, `node_ip`, `created_at`)
  SELECT `artifact_id`, `node_id`, `node_ip`, CAST(strftime('%s', `created_at`) AS INTEGER) FROM `t_cube_artifact_node_placement`;
DROP TABLE `t_cube_artifact_node_placement`;
ALTER TABLE `t_cube_artifact_node_placement_next` RENAME TO `t_cube_artifact_node_placement`;
CREATE TABLE `new_t_cube_rootfs_artifact` (`id` integer NOT NULL PRIMARY KEY AUTOINCREMENT, `created_at` datetime NOT NULL, `updated_at` datetime NOT NULL, `deleted_at` datetime NULL, `artifact_id` text NOT NULL, `template_spec_fingerprint` text NOT NULL, `source_image_ref` text NOT NULL DEFAULT (''), `source_image_digest` text NOT NULL DEFAULT (''), `master_node_id` text NOT NULL DEFAULT (''), `master_node_ip` text NOT NULL DEFAULT (''), `ext4_path` text NOT NULL DEFAULT (''), `ext4_sha256` text NOT NULL DEFAULT (''), `ext4_size_bytes` integer NOT NULL DEFAULT (0), `image_config_json` text NULL, `generated_request_json` text NULL, `writable_layer_size` text NOT NULL DEFAULT (''), `download_token` text NOT NULL DEFAULT (''), `status` text NOT NULL DEFAULT (''), `last_error` text NULL, `gc_deadline` integer NOT NULL DEFAULT (0), `artifact_url` text NULL, `storage_backend` text NOT NULL DEFAULT (''), `object_key` text NOT NULL DEFAULT (''), `build_owner_token` text NOT NULL DEFAULT (''), `build_generation` integer NOT NULL DEFAULT (0), `build_lease_expire_at` integer NOT NULL DEFAULT (0), `cube_egress_ca_baked` bool NOT NULL DEFAULT (false), `cube_egress_ca_fingerprint` text NOT NULL DEFAULT (''), `cube_egress_ca_targets_written` integer NOT NULL DEFAULT (0));
INSERT INTO `new_t_cube_rootfs_artifact` (`id`, `created_at`, `updated_at`, `deleted_at`, `artifact_id`, `template_spec_fingerprint`, `source_image_ref`, `source_image_digest`, `master_node_id`, `master_node_ip`, `ext4_path`, `ext4_sha256`, `ext4_size_bytes`, `image_config_json`, `generated_request_json`, `writable_layer_size`, `download_token`, `status`, `last_error`, `gc_deadline`, `artifact_url`, `storage_backend`, `object_key`, `build_owner_token`, `build_generation`, `build_lease_expire_at`, `cube_egress_ca_baked`, `cube_egress_ca_fingerprint`, `cube_egress_ca_targets_written`) SELECT `id`, `created_at`, `updated_at`, `deleted_at`, `artifact_id`, `template_spec_fingerprint`, `source_image_ref`, `source_image_digest`, `master_node_id`, `master_node_ip`, `ext4_path`, `ext4_sha256`, `ext4_size_bytes`, `image_config_json`, `generated_request_json`, `writable_layer_size`, `download_token`, `status`, `last_error`, `gc_deadline`, `artifact_url`, `storage_backend`, `object_key`, `build_owner_token`, `build_generation`, `build_lease_expire_at`, `cube_egress_ca_baked`, `cube_egress_ca_fingerprint`, CAST(IFNULL(`cube_egress_ca_targets_written`, '0') AS INTEGER) AS `cube_egress_ca_targets_written` FROM `t_cube_rootfs_artifact`;
DROP TABLE `t_cube_rootfs_artifact`;
ALTER TABLE `new_t_cube_rootfs_artifact` RENAME TO `t_cube_rootfs_artifact`;
CREATE UNIQUE INDEX `idx_artifact_id` ON `t_cube_rootfs_artifact` (`artifact_id`);
CREATE UNIQUE INDEX `idx_artifact_fingerprint` ON `t_cube_rootfs_artifact` (`template_spec_fingerprint`);
CREATE INDEX `idx_artifact_status` ON `t_cube_rootfs_artifact` (`status`, `updated_at`);
CREATE TABLE `new_t_cube_template_definition` (`id` integer NOT NULL PRIMARY KEY AUTOINCREMENT, `created_at` datetime NOT NULL, `updated_at` datetime NOT NULL, `deleted_at` datetime NULL, `template_id` text NOT NULL, `instance_type` text NOT NULL DEFAULT (''), `version` text NOT NULL DEFAULT (''), `status` text NOT NULL DEFAULT (''), `request_json` text NOT NULL, `last_error` text NULL, `alias` text NULL, `rootfs_artifact_id` text NOT NULL DEFAULT (''), `kind` text NOT NULL DEFAULT ('template'), `origin_sandbox_id` text NOT NULL DEFAULT (''), `origin_node_id` text NOT NULL DEFAULT (''), `display_name` text NOT NULL DEFAULT (''), `storage_backend` text NOT NULL DEFAULT (''), `retain` bool NOT NULL DEFAULT (false), `rootfs_size_bytes_at_snapshot` integer NOT NULL DEFAULT (0));
INSERT INTO `new_t_cube_template_definition` (`id`, `created_at`, `updated_at`, `deleted_at`, `template_id`, `instance_type`, `version`, `status`, `request_json`, `last_error`, `alias`, `rootfs_artifact_id`, `kind`, `origin_sandbox_id`, `origin_node_id`, `display_name`, `storage_backend`, `retain`, `rootfs_size_bytes_at_snapshot`) SELECT `id`, `created_at`, `updated_at`, `deleted_at`, `template_id`, `instance_type`, `version`, `status`, `request_json`, `last_error`, `alias`, `rootfs_artifact_id`, CASE WHEN `kind` IS NULL OR `kind` = '' THEN 'template' ELSE `kind` END AS `kind`, `origin_sandbox_id`, `origin_node_id`, CASE WHEN `alias` IS NOT NULL AND `alias` <> '' THEN `alias` ELSE `display_name` END AS `display_name`, `storage_backend`, `retain`, `rootfs_size_bytes_at_snapshot` FROM `t_cube_template_definition`;
DROP TABLE `t_cube_template_definition`;
ALTER TABLE `new_t_cube_template_definition` RENAME TO `t_cube_template_definition`;
CREATE UNIQUE INDEX `idx_template_id` ON `t_cube_template_definition` (`template_id`);
CREATE UNIQUE INDEX `idx_template_alias` ON `t_cube_template_definition` (`alias`);
CREATE INDEX `idx_status` ON `t_cube_template_definition` (`status`);
CREATE INDEX `idx_definition_rootfs_artifact` ON `t_cube_template_definition` (`rootfs_artifact_id`);
CREATE INDEX `idx_template_kind_status` ON `t_cube_template_definition` (`kind`, `status`);
CREATE INDEX `idx_snapshot_origin_sandbox` ON `t_cube_template_definition` (`origin_sandbox_id`);
CREATE INDEX `idx_snapshot_origin_node` ON `t_cube_template_definition` (`origin_node_id`);
CREATE INDEX `idx_template_storage_backend` ON `t_cube_template_definition` (`storage_backend`);
ALTER TABLE `t_cube_template_definition` ADD COLUMN `display_name_key` text
  GENERATED ALWAYS AS (CASE WHEN `display_name` = '' OR `kind` <> 'template' THEN NULL ELSE LOWER(`display_name`) END) VIRTUAL;
CREATE UNIQUE INDEX `idx_template_display_name_key` ON `t_cube_template_definition` (`display_name_key`);
UPDATE `t_cube_template_image_job` SET `request_id` = `job_id` WHERE `request_id` = '';
UPDATE `t_cube_template_image_job` SET `request_id` = substr(`request_id`, 1, 127 - length(`job_id`)) || '#' || `job_id`
  WHERE `id` NOT IN (SELECT MIN(`id`) FROM `t_cube_template_image_job` GROUP BY `request_id`, `operation`);
CREATE UNIQUE INDEX `idx_template_image_request_operation` ON `t_cube_template_image_job` (`request_id`, `operation`);
CREATE INDEX `idx_template_image_sandbox_status` ON `t_cube_template_image_job` (`sandbox_id`, `status`);
CREATE INDEX `idx_template_image_resource_status` ON `t_cube_template_image_job` (`resource_id`, `status`);
