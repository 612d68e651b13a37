-- 0004_upstream_superset: the schema becomes a superset of upstream's newest (postgres).
-- The ent part was generated with ent/cmd/migrationgen; the rest was written by hand:
--   * t_cube_artifact_node_placement takes upstream's shape: primary key (artifact_id, node_id),
--     created_at in unix seconds, no id or soft-delete columns;
--   * cube_egress_ca_targets_written an integer (node_ip is already unbounded here);
--   * kind defaults to 'template', and rows without one get it;
--   * the alias is also kept in display_name, behind upstream's generated, case-folded
--     display_name_key and its unique index, where upstream's master reads it;
--   * upstream's indexes; (request_id, operation) is unique, so empty request ids become the
--     job id and repeats get '#<job id>' appended (all but the oldest), as upstream normalizes.
-- Never edit an applied migration: add the next NNNN_name.sql instead (the checksum is recorded).
CREATE TABLE "t_cube_artifact_node_placement_next" (
  "artifact_id" character varying NOT NULL,
  "node_id" character varying NOT NULL,
  "node_ip" character varying NOT NULL DEFAULT '',
  "created_at" bigint NOT NULL DEFAULT 0,
  PRIMARY KEY ("artifact_id", "node_id")
);
INSERT INTO "t_cube_artifact_node_placement_next" ("artifact_id", "node_id", "node_ip", "created_at")
  SELECT "artifact_id", "node_id", "node_ip", CAST(EXTRACT(EPOCH FROM "created_at") AS bigint) FROM "t_cube_artifact_node_placement";
DROP TABLE "t_cube_artifact_node_placement";
ALTER TABLE "t_cube_artifact_node_placement_next" RENAME TO "t_cube_artifact_node_placement";
ALTER TABLE "t_cube_artifact_node_placement" RENAME CONSTRAINT "t_cube_artifact_node_placement_next_pkey" TO "t_cube_artifact_node_placement_pkey";
ALTER TABLE "t_cube_rootfs_artifact" ALTER COLUMN "cube_egress_ca_targets_written" TYPE bigint
  USING (CASE WHEN "cube_egress_ca_targets_written" ~ '^[0-9]{1,18}$' THEN CAST("cube_egress_ca_targets_written" AS bigint) ELSE 0 END),
  ALTER COLUMN "cube_egress_ca_targets_written" SET DEFAULT 0;
UPDATE "t_cube_rootfs_artifact" SET "cube_egress_ca_targets_written" = 0 WHERE "cube_egress_ca_targets_written" IS NULL;
ALTER TABLE "t_cube_rootfs_artifact" ALTER COLUMN "cube_egress_ca_targets_written" SET NOT NULL;
UPDATE "t_cube_template_definition" SET "kind" = 'template' WHERE "kind" = '';
UPDATE "t_cube_template_definition" SET "display_name" = "alias" WHERE "alias" IS NOT NULL AND "alias" <> '' AND "kind" = 'template';
ALTER TABLE "t_cube_template_definition" ALTER COLUMN "kind" SET DEFAULT 'template';
CREATE INDEX "idx_template_kind_status" ON "t_cube_template_definition" ("kind", "status");
CREATE INDEX "idx_snapshot_origin_sandbox" ON "t_cube_template_definition" ("origin_sandbox_id");
CREATE INDEX "idx_snapshot_origin_node" ON "t_cube_template_definition" ("origin_node_id");
CREATE INDEX "idx_template_storage_backend" ON "t_cube_template_definition" ("storage_backend");
ALTER TABLE "t_cube_template_definition" ADD COLUMN "display_name_key" character varying
  GENERATED ALWAYS AS (CASE WHEN "display_name" = '' OR "kind" <> 'template' THEN NULL ELSE LOWER("display_name") END) STORED;
CREATE UNIQUE INDEX "idx_template_display_name_key" ON "t_cube_template_definition" ("display_name_key");
UPDATE "t_cube_template_image_job" SET "request_id" = "job_id" WHERE "request_id" = '';
UPDATE "t_cube_template_image_job" t
  SET "request_id" = LEFT(t."request_id", 127 - LENGTH(t."job_id")) || '#' || t."job_id"
  FROM (SELECT MIN("id") AS keep_id, "request_id", "operation" FROM "t_cube_template_image_job"
        GROUP BY "request_id", "operation" HAVING COUNT(*) > 1) d
  WHERE d."request_id" = t."request_id" AND d."operation" = t."operation" AND t."id" <> d.keep_id;
CREATE UNIQUE INDEX "idx_template_image_request_operation" ON "t_cube_template_image_job" ("request_id", "operation");
CREATE INDEX "idx_template_image_sandbox_status" ON "t_cube_template_image_job" ("sandbox_id", "status");
CREATE INDEX "idx_template_image_resource_status" ON "t_cube_template_image_job" ("resource_id", "status");
