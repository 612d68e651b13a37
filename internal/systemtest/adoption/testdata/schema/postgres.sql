-- An upstream CubeMaster database at its newest schema (PostgreSQL), written for the adoption test
-- from upstream's gorm models (CubeMaster/pkg/base/db/models) and its goose migrations
-- (0002_v0_2_2_to_head, 0007_template_image_pull_progress, 20260623051112_template_display_name_index,
-- 20260720090000_rootfs_artifact_build_lease): gorm.Model columns as timestamptz(3), the placement table keyed
-- (artifact_id, node_id), goose's own version table, and a table this service never touches.
CREATE TABLE "goose_db_version" (
  "id" bigserial NOT NULL,
  "version_id" bigint NOT NULL,
  "is_applied" boolean NOT NULL,
  "tstamp" timestamp NULL DEFAULT now(),
  PRIMARY KEY ("id")
);

INSERT INTO "goose_db_version" ("version_id", "is_applied") VALUES (0, true), (1, true), (2, true), (7, true), (20260623051112, true), (20260720090000, true);

CREATE TABLE "t_cube_template_definition" (
  "id" bigserial NOT NULL,
  "created_at" timestamptz(3) DEFAULT NULL,
  "updated_at" timestamptz(3) DEFAULT NULL,
  "deleted_at" timestamptz(3) DEFAULT NULL,
  "template_id" varchar(128) NOT NULL,
  "instance_type" varchar(64) NOT NULL DEFAULT '',
  "version" varchar(32) NOT NULL DEFAULT '',
  "status" varchar(32) NOT NULL DEFAULT '',
  "kind" varchar(32) NOT NULL DEFAULT 'template',
  "origin_sandbox_id" varchar(128) NOT NULL DEFAULT '',
  "origin_node_id" varchar(128) NOT NULL DEFAULT '',
  "display_name" varchar(256) NOT NULL DEFAULT '',
  "display_name_key" varchar(256) GENERATED ALWAYS AS (CASE WHEN "display_name" = '' OR "kind" <> 'template' THEN NULL ELSE LOWER("display_name") END) STORED,
  "storage_backend" varchar(32) NOT NULL DEFAULT '',
  "retain" boolean NOT NULL DEFAULT false,
  "rootfs_size_bytes_at_snapshot" bigint NOT NULL DEFAULT 0,
  "rootfs_artifact_id" varchar(128) NOT NULL DEFAULT '',
  "request_json" text NOT NULL,
  "last_error" text,
  PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "idx_template_id" ON "t_cube_template_definition" ("template_id");
CREATE INDEX "idx_status" ON "t_cube_template_definition" ("status");
CREATE INDEX "idx_template_kind_status" ON "t_cube_template_definition" ("kind", "status");
CREATE INDEX "idx_snapshot_origin_sandbox" ON "t_cube_template_definition" ("origin_sandbox_id");
CREATE INDEX "idx_snapshot_origin_node" ON "t_cube_template_definition" ("origin_node_id");
CREATE INDEX "idx_template_storage_backend" ON "t_cube_template_definition" ("storage_backend");
CREATE UNIQUE INDEX "idx_template_display_name_key" ON "t_cube_template_definition" ("display_name_key");
CREATE INDEX "idx_deleted_at" ON "t_cube_template_definition" ("deleted_at");

CREATE TABLE "t_cube_template_replica" (
  "id" bigserial NOT NULL,
  "created_at" timestamptz(3) DEFAULT NULL,
  "updated_at" timestamptz(3) DEFAULT NULL,
  "deleted_at" timestamptz(3) DEFAULT NULL,
  "template_id" varchar(128) NOT NULL DEFAULT '',
  "node_id" varchar(128) NOT NULL DEFAULT '',
  "node_ip" varchar(64) NOT NULL DEFAULT '',
  "instance_type" varchar(64) NOT NULL DEFAULT '',
  "spec" varchar(128) NOT NULL DEFAULT '',
  "status" varchar(32) NOT NULL DEFAULT '',
  "phase" varchar(32) NOT NULL DEFAULT '',
  "artifact_id" varchar(128) NOT NULL DEFAULT '',
  "last_job_id" varchar(128) NOT NULL DEFAULT '',
  "last_error_phase" varchar(64) NOT NULL DEFAULT '',
  "cleanup_required" boolean NOT NULL DEFAULT false,
  "error_message" text,
  "guest_image_version" varchar(64) NOT NULL DEFAULT '',
  "agent_version" varchar(64) NOT NULL DEFAULT '',
  "kernel_version" varchar(64) NOT NULL DEFAULT '',
  "compat_status" varchar(32) NOT NULL DEFAULT '',
  "compat_policy" varchar(32) NOT NULL DEFAULT '',
  "compat_checked_unix" bigint NOT NULL DEFAULT 0,
  PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "idx_template_node" ON "t_cube_template_replica" ("template_id", "node_id");
CREATE INDEX "idx_template_status" ON "t_cube_template_replica" ("template_id", "status");

CREATE TABLE "t_cube_rootfs_artifact" (
  "id" bigserial NOT NULL,
  "created_at" timestamptz(3) DEFAULT NULL,
  "updated_at" timestamptz(3) DEFAULT NULL,
  "deleted_at" timestamptz(3) DEFAULT NULL,
  "artifact_id" varchar(128) NOT NULL,
  "template_spec_fingerprint" varchar(128) NOT NULL,
  "source_image_ref" varchar(1024) NOT NULL DEFAULT '',
  "source_image_digest" varchar(256) NOT NULL DEFAULT '',
  "master_node_id" varchar(128) NOT NULL DEFAULT '',
  "master_node_ip" varchar(256) NOT NULL DEFAULT '',
  "ext4_path" varchar(2048) NOT NULL DEFAULT '',
  "ext4_sha256" varchar(128) NOT NULL DEFAULT '',
  "ext4_size_bytes" bigint NOT NULL DEFAULT 0,
  "image_config_json" text,
  "generated_request_json" text,
  "writable_layer_size" varchar(64) NOT NULL DEFAULT '',
  "download_token" varchar(256) NOT NULL DEFAULT '',
  "status" varchar(32) NOT NULL DEFAULT '',
  "last_error" text,
  "gc_deadline" bigint NOT NULL DEFAULT 0,
  "build_owner_token" varchar(128) NOT NULL DEFAULT '',
  "build_generation" bigint NOT NULL DEFAULT 0,
  "build_lease_expire_at" bigint NOT NULL DEFAULT 0,
  "artifact_url" text,
  "storage_backend" varchar(32) NOT NULL DEFAULT '',
  "object_key" varchar(1024) NOT NULL DEFAULT '',
  "cube_egress_ca_baked" boolean NOT NULL DEFAULT false,
  "cube_egress_ca_fingerprint" varchar(128) NOT NULL DEFAULT '',
  "cube_egress_ca_targets_written" bigint NOT NULL DEFAULT 0,
  PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "idx_artifact_id" ON "t_cube_rootfs_artifact" ("artifact_id");
CREATE UNIQUE INDEX "idx_artifact_fingerprint" ON "t_cube_rootfs_artifact" ("template_spec_fingerprint");
CREATE INDEX "idx_artifact_status" ON "t_cube_rootfs_artifact" ("status");

CREATE TABLE "t_cube_template_image_job" (
  "id" bigserial NOT NULL,
  "created_at" timestamptz(3) DEFAULT NULL,
  "updated_at" timestamptz(3) DEFAULT NULL,
  "deleted_at" timestamptz(3) DEFAULT NULL,
  "job_id" varchar(128) NOT NULL,
  "template_id" varchar(128) NOT NULL DEFAULT '',
  "request_id" varchar(128) NOT NULL DEFAULT '',
  "sandbox_id" varchar(128) NOT NULL DEFAULT '',
  "resource_type" varchar(32) NOT NULL DEFAULT '',
  "resource_id" varchar(128) NOT NULL DEFAULT '',
  "attempt_no" int NOT NULL DEFAULT 1,
  "retry_of_job_id" varchar(128) NOT NULL DEFAULT '',
  "operation" varchar(32) NOT NULL DEFAULT '',
  "redo_mode" varchar(32) NOT NULL DEFAULT '',
  "redo_scope_json" text,
  "resume_phase" varchar(64) NOT NULL DEFAULT '',
  "node_id" varchar(128) NOT NULL DEFAULT '',
  "node_ip" varchar(256) NOT NULL DEFAULT '',
  "snapshot_path" varchar(1024) NOT NULL DEFAULT '',
  "artifact_id" varchar(128) NOT NULL DEFAULT '',
  "template_spec_fingerprint" varchar(128) NOT NULL DEFAULT '',
  "source_image_ref" varchar(1024) NOT NULL DEFAULT '',
  "source_image_digest" varchar(256) NOT NULL DEFAULT '',
  "writable_layer_size" varchar(64) NOT NULL DEFAULT '',
  "instance_type" varchar(64) NOT NULL DEFAULT '',
  "network_type" varchar(64) NOT NULL DEFAULT '',
  "status" varchar(32) NOT NULL DEFAULT '',
  "phase" varchar(64) NOT NULL DEFAULT '',
  "progress" int NOT NULL DEFAULT 0,
  "error_message" text,
  "expected_node_count" int NOT NULL DEFAULT 0,
  "ready_node_count" int NOT NULL DEFAULT 0,
  "failed_node_count" int NOT NULL DEFAULT 0,
  "template_status" varchar(32) NOT NULL DEFAULT '',
  "artifact_status" varchar(32) NOT NULL DEFAULT '',
  "request_json" text,
  "result_json" text,
  "pull_total_bytes" bigint NOT NULL DEFAULT 0,
  "pull_downloaded_bytes" bigint NOT NULL DEFAULT 0,
  "pull_total_layers" int NOT NULL DEFAULT 0,
  "pull_completed_layers" int NOT NULL DEFAULT 0,
  "pull_speed_bps" bigint NOT NULL DEFAULT 0,
  PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "idx_template_image_job_id" ON "t_cube_template_image_job" ("job_id");
CREATE UNIQUE INDEX "idx_template_image_template_attempt" ON "t_cube_template_image_job" ("template_id", "attempt_no");
CREATE INDEX "idx_template_image_template_status" ON "t_cube_template_image_job" ("template_id", "status");
CREATE INDEX "idx_template_image_status" ON "t_cube_template_image_job" ("status");
CREATE INDEX "idx_template_image_sandbox_status" ON "t_cube_template_image_job" ("sandbox_id", "status");
CREATE INDEX "idx_template_image_resource_status" ON "t_cube_template_image_job" ("resource_id", "status");
CREATE UNIQUE INDEX "idx_template_image_request_operation" ON "t_cube_template_image_job" ("request_id", "operation");

CREATE TABLE "t_cube_artifact_node_placement" (
  "artifact_id" varchar(128) NOT NULL,
  "node_id" varchar(128) NOT NULL,
  "node_ip" varchar(64) NOT NULL DEFAULT '',
  "created_at" bigint NOT NULL DEFAULT 0,
  PRIMARY KEY ("artifact_id", "node_id")
);

CREATE TABLE "t_cube_sandbox_spec" (
  "id" bigserial NOT NULL,
  "sandbox_id" varchar(128) NOT NULL,
  "template_id" varchar(128) NOT NULL DEFAULT '',
  "request_json" text NOT NULL,
  "created_at" timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
  "updated_at" timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
  "deleted_at" timestamptz DEFAULT NULL,
  PRIMARY KEY ("id")
);
CREATE UNIQUE INDEX "idx_sandbox_spec_sandbox_id" ON "t_cube_sandbox_spec" ("sandbox_id");
