-- 0001_init: the metadata tables (sqlite).
-- Generated from the ent schema with ent/cmd/migrationgen, then laid out one column per line.
-- Never edit an applied migration: add the next NNNN_name.sql instead (the checksum is recorded).

CREATE TABLE `t_cube_artifact_node_placement` (
  `id` integer NOT NULL PRIMARY KEY AUTOINCREMENT,
  `created_at` datetime NOT NULL,
  `updated_at` datetime NOT NULL,
  `deleted_at` datetime NULL,
  `artifact_id` text NOT NULL,
  `node_id` text NOT NULL,
  `node_ip` text NOT NULL DEFAULT ('')
);

CREATE UNIQUE INDEX `idx_placement_artifact_node` ON `t_cube_artifact_node_placement` (`artifact_id`, `node_id`);

CREATE TABLE `t_cube_rootfs_artifact` (
  `id` integer NOT NULL PRIMARY KEY AUTOINCREMENT,
  `created_at` datetime NOT NULL,
  `updated_at` datetime NOT NULL,
  `deleted_at` datetime NULL,
  `artifact_id` text NOT NULL,
  `template_spec_fingerprint` text NOT NULL,
  `source_image_ref` text NOT NULL DEFAULT (''),
  `source_image_digest` text NOT NULL DEFAULT (''),
  `master_node_id` text NOT NULL DEFAULT (''),
  `master_node_ip` text NOT NULL DEFAULT (''),
  `ext4_path` text NOT NULL DEFAULT (''),
  `ext4_sha256` text NOT NULL DEFAULT (''),
  `ext4_size_bytes` integer NOT NULL DEFAULT (0),
  `image_config_json` text NULL,
  `generated_request_json` text NULL,
  `writable_layer_size` text NOT NULL DEFAULT (''),
  `download_token` text NOT NULL DEFAULT (''),
  `status` text NOT NULL DEFAULT (''),
  `last_error` text NULL,
  `gc_deadline` integer NOT NULL DEFAULT (0),
  `artifact_url` text NULL,
  `storage_backend` text NOT NULL DEFAULT (''),
  `object_key` text NOT NULL DEFAULT (''),
  `build_owner_token` text NOT NULL DEFAULT (''),
  `build_generation` integer NOT NULL DEFAULT (0),
  `build_lease_expire_at` integer NOT NULL DEFAULT (0),
  `cube_egress_ca_baked` bool NOT NULL DEFAULT (false),
  `cube_egress_ca_fingerprint` text NOT NULL DEFAULT (''),
  `cube_egress_ca_targets_written` text NULL
);

CREATE UNIQUE INDEX `idx_artifact_id` ON `t_cube_rootfs_artifact` (`artifact_id`);

CREATE UNIQUE INDEX `idx_artifact_fingerprint` ON `t_cube_rootfs_artifact` (`template_spec_fingerprint`);

CREATE INDEX `idx_artifact_status` ON `t_cube_rootfs_artifact` (`status`, `updated_at`);

CREATE TABLE `t_cube_template_definition` (
  `id` integer NOT NULL PRIMARY KEY AUTOINCREMENT,
  `created_at` datetime NOT NULL,
  `updated_at` datetime NOT NULL,
  `deleted_at` datetime NULL,
  `template_id` text NOT NULL,
  `instance_type` text NOT NULL DEFAULT (''),
  `version` text NOT NULL DEFAULT (''),
  `status` text NOT NULL DEFAULT (''),
  `request_json` text NOT NULL,
  `last_error` text NULL,
  `alias` text NULL,
  `rootfs_artifact_id` text NOT NULL DEFAULT (''),
  `kind` text NOT NULL DEFAULT (''),
  `origin_sandbox_id` text NOT NULL DEFAULT (''),
  `origin_node_id` text NOT NULL DEFAULT (''),
  `display_name` text NOT NULL DEFAULT (''),
  `storage_backend` text NOT NULL DEFAULT (''),
  `retain` bool NOT NULL DEFAULT (false),
  `rootfs_size_bytes_at_snapshot` integer NOT NULL DEFAULT (0)
);

CREATE UNIQUE INDEX `idx_template_id` ON `t_cube_template_definition` (`template_id`);

CREATE UNIQUE INDEX `idx_template_alias` ON `t_cube_template_definition` (`alias`);

CREATE INDEX `idx_status` ON `t_cube_template_definition` (`status`);

CREATE INDEX `idx_definition_rootfs_artifact` ON `t_cube_template_definition` (`rootfs_artifact_id`);

CREATE TABLE `t_cube_template_image_job` (
  `id` integer NOT NULL PRIMARY KEY AUTOINCREMENT,
  `created_at` datetime NOT NULL,
  `updated_at` datetime NOT NULL,
  `deleted_at` datetime NULL,
  `job_id` text NOT NULL,
  `template_id` text NOT NULL,
  `attempt_no` integer NOT NULL DEFAULT (1),
  `retry_of_job_id` text NOT NULL DEFAULT (''),
  `operation` text NOT NULL DEFAULT (''),
  `redo_mode` text NOT NULL DEFAULT (''),
  `redo_scope_json` text NULL,
  `resume_phase` text NOT NULL DEFAULT (''),
  `node_id` text NOT NULL DEFAULT (''),
  `node_ip` text NOT NULL DEFAULT (''),
  `snapshot_path` text NOT NULL DEFAULT (''),
  `artifact_id` text NOT NULL DEFAULT (''),
  `template_spec_fingerprint` text NOT NULL DEFAULT (''),
  `source_image_ref` text NOT NULL DEFAULT (''),
  `source_image_digest` text NOT NULL DEFAULT (''),
  `writable_layer_size` text NOT NULL DEFAULT (''),
  `instance_type` text NOT NULL DEFAULT (''),
  `network_type` text NOT NULL DEFAULT (''),
  `status` text NOT NULL DEFAULT (''),
  `phase` text NOT NULL DEFAULT (''),
  `progress` integer NOT NULL DEFAULT (0),
  `error_message` text NULL,
  `expected_node_count` integer NOT NULL DEFAULT (0),
  `ready_node_count` integer NOT NULL DEFAULT (0),
  `failed_node_count` integer NOT NULL DEFAULT (0),
  `template_status` text NOT NULL DEFAULT (''),
  `artifact_status` text NOT NULL DEFAULT (''),
  `request_json` text NULL,
  `result_json` text NULL,
  `request_id` text NOT NULL DEFAULT (''),
  `sandbox_id` text NOT NULL DEFAULT (''),
  `resource_type` text NOT NULL DEFAULT (''),
  `resource_id` text NOT NULL DEFAULT (''),
  `pull_total_bytes` integer NOT NULL DEFAULT (0),
  `pull_downloaded_bytes` integer NOT NULL DEFAULT (0),
  `pull_total_layers` integer NOT NULL DEFAULT (0),
  `pull_completed_layers` integer NOT NULL DEFAULT (0),
  `pull_speed_bps` integer NOT NULL DEFAULT (0),
  `active_key` text NULL
);

CREATE UNIQUE INDEX `idx_template_image_job_id` ON `t_cube_template_image_job` (`job_id`);

CREATE UNIQUE INDEX `idx_template_image_template_attempt` ON `t_cube_template_image_job` (`template_id`, `attempt_no`);

CREATE INDEX `idx_template_image_template_status` ON `t_cube_template_image_job` (`template_id`, `status`);

CREATE INDEX `idx_template_image_status` ON `t_cube_template_image_job` (`status`, `updated_at`);

CREATE UNIQUE INDEX `idx_template_image_active_key` ON `t_cube_template_image_job` (`active_key`);

CREATE INDEX `idx_template_image_artifact` ON `t_cube_template_image_job` (`artifact_id`);

CREATE TABLE `t_cube_template_replica` (
  `id` integer NOT NULL PRIMARY KEY AUTOINCREMENT,
  `created_at` datetime NOT NULL,
  `updated_at` datetime NOT NULL,
  `deleted_at` datetime NULL,
  `template_id` text NOT NULL,
  `node_id` text NOT NULL,
  `node_ip` text NOT NULL DEFAULT (''),
  `instance_type` text NOT NULL DEFAULT (''),
  `spec` text NOT NULL DEFAULT (''),
  `snapshot_path` text NOT NULL DEFAULT (''),
  `status` text NOT NULL DEFAULT (''),
  `phase` text NOT NULL DEFAULT (''),
  `artifact_id` text NOT NULL DEFAULT (''),
  `last_job_id` text NOT NULL DEFAULT (''),
  `last_error_phase` text NOT NULL DEFAULT (''),
  `cleanup_required` bool NOT NULL DEFAULT (false),
  `error_message` text NULL,
  `guest_image_version` text NOT NULL DEFAULT (''),
  `agent_version` text NOT NULL DEFAULT (''),
  `kernel_version` text NOT NULL DEFAULT (''),
  `shim_version` text NOT NULL DEFAULT (''),
  `compat_status` text NOT NULL DEFAULT (''),
  `compat_policy` text NOT NULL DEFAULT (''),
  `compat_checked_unix` integer NOT NULL DEFAULT (0)
);

CREATE UNIQUE INDEX `idx_template_node` ON `t_cube_template_replica` (`template_id`, `node_id`);

CREATE INDEX `idx_template_status` ON `t_cube_template_replica` (`template_id`, `status`);

CREATE INDEX `idx_replica_artifact` ON `t_cube_template_replica` (`artifact_id`);
