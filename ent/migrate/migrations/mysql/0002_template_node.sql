-- 0002_template_node: nodes registered in the database (mysql).
-- Generated from the ent schema with ent/cmd/migrationgen, then laid out one column per line.
-- Never edit an applied migration: add the next NNNN_name.sql instead (the checksum is recorded).
CREATE TABLE `t_cube_template_node` (
  `id` bigint NOT NULL AUTO_INCREMENT,
  `node_id` varchar(128) NOT NULL,
  `node_ip` varchar(64) NOT NULL DEFAULT '',
  `grpc_addr` varchar(255) NOT NULL DEFAULT '',
  `instance_type` varchar(64) NOT NULL DEFAULT '',
  `disabled` bool NOT NULL DEFAULT false,
  `created_at` datetime(6) NOT NULL,
  `updated_at` datetime(6) NOT NULL,
  PRIMARY KEY (`id`),
  UNIQUE INDEX `idx_template_node_id` (`node_id`)
) CHARSET utf8mb4 COLLATE utf8mb4_bin;
