-- An upstream CubeMaster database at the newest schema (PostgreSQL), for the adoption test.
-- The tables this service reads, as upstream's goose migrations (CubeDB/migrate/migrations/postgres,
-- every file up to 20260812120000_template_replica_shim_version, master 23c69d6c) leave them: this
-- file is that database's pg_dump --schema-only output for them. On top, the newest release's
-- schema changes upstream lists (`retain` dropped; t_cube_rootfs_artifact gains artifact_url,
-- storage_backend, object_key and the build-lease columns), written the way upstream writes its
-- other columns. goose's version table records the chain; t_cube_sandbox_spec is a table this
-- service never touches.
CREATE TABLE goose_db_version (id serial PRIMARY KEY, version_id bigint NOT NULL, is_applied boolean NOT NULL, tstamp timestamp DEFAULT now());
INSERT INTO goose_db_version (version_id, is_applied) VALUES (0, true), (1, true), (2, true), (3, true), (4, true), (5, true), (6, true), (7, true), (8, true), (9, true), (10, true), (20260623145000, true), (20260624113500, true), (20260624121500, true), (20260701040100, true), (20260702050000, true), (20260704120000, true), (20260713160000, true), (20260718160000, true), (20260722120000, true), (20260731120000, true), (20260810120000, true), (20260812120000, true);
CREATE TABLE t_cube_artifact_node_placement (
    artifact_id character varying(128) NOT NULL,
    node_id character varying(128) NOT NULL,
    node_ip character varying(64) DEFAULT ''::character varying NOT NULL,
    created_at bigint DEFAULT 0 NOT NULL
);
CREATE TABLE t_cube_rootfs_artifact (
    id bigint NOT NULL,
    artifact_id character varying(128) NOT NULL,
    template_spec_fingerprint character varying(128) DEFAULT ''::character varying NOT NULL,
    source_image_ref character varying(1024) DEFAULT ''::character varying NOT NULL,
    source_image_digest character varying(256) DEFAULT ''::character varying NOT NULL,
    master_node_id character varying(128) DEFAULT ''::character varying NOT NULL,
    master_node_ip character varying(256) DEFAULT ''::character varying NOT NULL,
    ext4_path character varying(2048) DEFAULT ''::character varying NOT NULL,
    ext4_sha256 character varying(128) DEFAULT ''::character varying NOT NULL,
    ext4_size_bytes bigint DEFAULT 0 NOT NULL,
    image_config_json text,
    generated_request_json text,
    writable_layer_size character varying(64) DEFAULT ''::character varying NOT NULL,
    download_token character varying(256) DEFAULT ''::character varying NOT NULL,
    status character varying(32) DEFAULT ''::character varying NOT NULL,
    last_error text,
    gc_deadline bigint DEFAULT 0 NOT NULL,
    created_at timestamp without time zone DEFAULT CURRENT_TIMESTAMP NOT NULL,
    updated_at timestamp without time zone DEFAULT CURRENT_TIMESTAMP NOT NULL,
    deleted_at timestamp without time zone,
    artifact_url character varying(2048) DEFAULT ''::character varying NOT NULL,
    storage_backend character varying(32) DEFAULT ''::character varying NOT NULL,
    object_key character varying(1024) DEFAULT ''::character varying NOT NULL,
    build_owner_token character varying(128) DEFAULT ''::character varying NOT NULL,
    build_generation bigint DEFAULT 0 NOT NULL,
    build_lease_expire_at bigint DEFAULT 0 NOT NULL,
    cube_egress_ca_baked boolean DEFAULT false NOT NULL,
    cube_egress_ca_fingerprint character varying(128) DEFAULT ''::character varying NOT NULL,
    cube_egress_ca_targets_written integer DEFAULT 0 NOT NULL
);
CREATE SEQUENCE t_cube_rootfs_artifact_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
ALTER SEQUENCE t_cube_rootfs_artifact_id_seq OWNED BY t_cube_rootfs_artifact.id;
CREATE TABLE t_cube_sandbox_spec (
    id bigint NOT NULL,
    sandbox_id character varying(128) NOT NULL,
    template_id character varying(128) DEFAULT ''::character varying NOT NULL,
    instance_type character varying(64) DEFAULT ''::character varying NOT NULL,
    network_type character varying(64) DEFAULT ''::character varying NOT NULL,
    host_id character varying(128) DEFAULT ''::character varying NOT NULL,
    host_ip character varying(64) DEFAULT ''::character varying NOT NULL,
    request_json text DEFAULT ''::text NOT NULL,
    backfilled boolean DEFAULT false NOT NULL,
    created_at timestamp without time zone DEFAULT CURRENT_TIMESTAMP NOT NULL,
    updated_at timestamp without time zone DEFAULT CURRENT_TIMESTAMP NOT NULL,
    deleted_at timestamp without time zone
);
CREATE SEQUENCE t_cube_sandbox_spec_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
ALTER SEQUENCE t_cube_sandbox_spec_id_seq OWNED BY t_cube_sandbox_spec.id;
CREATE TABLE t_cube_template_definition (
    id bigint NOT NULL,
    template_id character varying(128) NOT NULL,
    instance_type character varying(64) DEFAULT ''::character varying NOT NULL,
    version character varying(32) DEFAULT ''::character varying NOT NULL,
    status character varying(32) DEFAULT ''::character varying NOT NULL,
    request_json text DEFAULT ''::text NOT NULL,
    last_error text,
    created_at timestamp without time zone DEFAULT CURRENT_TIMESTAMP NOT NULL,
    updated_at timestamp without time zone DEFAULT CURRENT_TIMESTAMP NOT NULL,
    deleted_at timestamp without time zone,
    kind character varying(32) DEFAULT 'template'::character varying NOT NULL,
    origin_sandbox_id character varying(128) DEFAULT ''::character varying NOT NULL,
    origin_node_id character varying(128) DEFAULT ''::character varying NOT NULL,
    display_name character varying(256) DEFAULT ''::character varying NOT NULL,
    storage_backend character varying(32) DEFAULT ''::character varying NOT NULL,
    rootfs_size_bytes_at_snapshot bigint DEFAULT 0 NOT NULL,
    rootfs_artifact_id character varying(128) DEFAULT ''::character varying NOT NULL,
    alias_key character varying(256) GENERATED ALWAYS AS (
CASE
    WHEN (((kind)::text = 'template'::text) AND ((display_name)::text <> ''::text)) THEN display_name
    ELSE NULL::character varying
END) STORED,
    origin_host_facts_json text
);
CREATE SEQUENCE t_cube_template_definition_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
ALTER SEQUENCE t_cube_template_definition_id_seq OWNED BY t_cube_template_definition.id;
CREATE TABLE t_cube_template_image_job (
    id bigint NOT NULL,
    job_id character varying(128) NOT NULL,
    template_id character varying(128) DEFAULT ''::character varying NOT NULL,
    request_id character varying(128) DEFAULT ''::character varying NOT NULL,
    attempt_no integer DEFAULT 1 NOT NULL,
    retry_of_job_id character varying(128) DEFAULT ''::character varying NOT NULL,
    operation character varying(32) DEFAULT ''::character varying NOT NULL,
    redo_mode character varying(32) DEFAULT ''::character varying NOT NULL,
    redo_scope_json text,
    resume_phase character varying(64) DEFAULT ''::character varying NOT NULL,
    node_id character varying(128) DEFAULT ''::character varying NOT NULL,
    node_ip character varying(256) DEFAULT ''::character varying NOT NULL,
    snapshot_path character varying(1024) DEFAULT ''::character varying NOT NULL,
    artifact_id character varying(128) DEFAULT ''::character varying NOT NULL,
    template_spec_fingerprint character varying(128) DEFAULT ''::character varying NOT NULL,
    source_image_ref character varying(1024) DEFAULT ''::character varying NOT NULL,
    source_image_digest character varying(256) DEFAULT ''::character varying NOT NULL,
    writable_layer_size character varying(64) DEFAULT ''::character varying NOT NULL,
    instance_type character varying(64) DEFAULT ''::character varying NOT NULL,
    network_type character varying(64) DEFAULT ''::character varying NOT NULL,
    status character varying(32) DEFAULT ''::character varying NOT NULL,
    phase character varying(64) DEFAULT ''::character varying NOT NULL,
    progress integer DEFAULT 0 NOT NULL,
    error_message text,
    expected_node_count integer DEFAULT 0 NOT NULL,
    ready_node_count integer DEFAULT 0 NOT NULL,
    failed_node_count integer DEFAULT 0 NOT NULL,
    template_status character varying(32) DEFAULT ''::character varying NOT NULL,
    artifact_status character varying(32) DEFAULT ''::character varying NOT NULL,
    request_json text,
    result_json text,
    created_at timestamp without time zone DEFAULT CURRENT_TIMESTAMP NOT NULL,
    updated_at timestamp without time zone DEFAULT CURRENT_TIMESTAMP NOT NULL,
    deleted_at timestamp without time zone,
    sandbox_id character varying(128) DEFAULT ''::character varying NOT NULL,
    resource_type character varying(32) DEFAULT ''::character varying NOT NULL,
    resource_id character varying(128) DEFAULT ''::character varying NOT NULL,
    pull_total_bytes bigint DEFAULT 0 NOT NULL,
    pull_downloaded_bytes bigint DEFAULT 0 NOT NULL,
    pull_total_layers integer DEFAULT 0 NOT NULL,
    pull_completed_layers integer DEFAULT 0 NOT NULL,
    pull_speed_bps bigint DEFAULT 0 NOT NULL
);
CREATE SEQUENCE t_cube_template_image_job_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
ALTER SEQUENCE t_cube_template_image_job_id_seq OWNED BY t_cube_template_image_job.id;
CREATE TABLE t_cube_template_replica (
    id bigint NOT NULL,
    template_id character varying(128) NOT NULL,
    node_id character varying(128) NOT NULL,
    node_ip character varying(64) DEFAULT ''::character varying NOT NULL,
    instance_type character varying(64) DEFAULT ''::character varying NOT NULL,
    spec character varying(128) DEFAULT ''::character varying NOT NULL,
    status character varying(32) DEFAULT ''::character varying NOT NULL,
    phase character varying(32) DEFAULT ''::character varying NOT NULL,
    artifact_id character varying(128) DEFAULT ''::character varying NOT NULL,
    last_job_id character varying(128) DEFAULT ''::character varying NOT NULL,
    last_error_phase character varying(64) DEFAULT ''::character varying NOT NULL,
    cleanup_required boolean DEFAULT false NOT NULL,
    error_message text,
    created_at timestamp without time zone DEFAULT CURRENT_TIMESTAMP NOT NULL,
    updated_at timestamp without time zone DEFAULT CURRENT_TIMESTAMP NOT NULL,
    deleted_at timestamp without time zone,
    guest_image_version character varying(128) DEFAULT ''::character varying NOT NULL,
    agent_version character varying(128) DEFAULT ''::character varying NOT NULL,
    kernel_version character varying(256) DEFAULT ''::character varying NOT NULL,
    compat_status character varying(32) DEFAULT 'UNKNOWN'::character varying NOT NULL,
    compat_policy character varying(32) DEFAULT 'STRICT'::character varying NOT NULL,
    compat_checked_unix bigint DEFAULT 0 NOT NULL,
    shim_version character varying(128) DEFAULT ''::character varying NOT NULL
);
CREATE SEQUENCE t_cube_template_replica_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
ALTER SEQUENCE t_cube_template_replica_id_seq OWNED BY t_cube_template_replica.id;
ALTER TABLE ONLY t_cube_rootfs_artifact ALTER COLUMN id SET DEFAULT nextval('t_cube_rootfs_artifact_id_seq'::regclass);
ALTER TABLE ONLY t_cube_sandbox_spec ALTER COLUMN id SET DEFAULT nextval('t_cube_sandbox_spec_id_seq'::regclass);
ALTER TABLE ONLY t_cube_template_definition ALTER COLUMN id SET DEFAULT nextval('t_cube_template_definition_id_seq'::regclass);
ALTER TABLE ONLY t_cube_template_image_job ALTER COLUMN id SET DEFAULT nextval('t_cube_template_image_job_id_seq'::regclass);
ALTER TABLE ONLY t_cube_template_replica ALTER COLUMN id SET DEFAULT nextval('t_cube_template_replica_id_seq'::regclass);
ALTER TABLE ONLY t_cube_artifact_node_placement
    ADD CONSTRAINT t_cube_artifact_node_placement_pkey PRIMARY KEY (artifact_id, node_id);
ALTER TABLE ONLY t_cube_rootfs_artifact
    ADD CONSTRAINT t_cube_rootfs_artifact_pkey PRIMARY KEY (id);
ALTER TABLE ONLY t_cube_sandbox_spec
    ADD CONSTRAINT t_cube_sandbox_spec_pkey PRIMARY KEY (id);
ALTER TABLE ONLY t_cube_template_definition
    ADD CONSTRAINT t_cube_template_definition_pkey PRIMARY KEY (id);
ALTER TABLE ONLY t_cube_template_image_job
    ADD CONSTRAINT t_cube_template_image_job_pkey PRIMARY KEY (id);
ALTER TABLE ONLY t_cube_template_replica
    ADD CONSTRAINT t_cube_template_replica_pkey PRIMARY KEY (id);
CREATE INDEX idx_artifact_node_placement_artifact ON t_cube_artifact_node_placement USING btree (artifact_id);
CREATE INDEX idx_node_compat ON t_cube_template_replica USING btree (node_id, compat_status);
CREATE UNIQUE INDEX idx_rootfs_artifact_artifact_id ON t_cube_rootfs_artifact USING btree (artifact_id);
CREATE UNIQUE INDEX idx_rootfs_artifact_fingerprint ON t_cube_rootfs_artifact USING btree (template_spec_fingerprint);
CREATE INDEX idx_rootfs_artifact_status ON t_cube_rootfs_artifact USING btree (status);
CREATE INDEX idx_sandbox_spec_deleted_at ON t_cube_sandbox_spec USING btree (deleted_at);
CREATE UNIQUE INDEX idx_sandbox_spec_sandbox_id ON t_cube_sandbox_spec USING btree (sandbox_id);
CREATE INDEX idx_sandbox_spec_template_id ON t_cube_sandbox_spec USING btree (template_id);
CREATE INDEX idx_snapshot_origin_node ON t_cube_template_definition USING btree (origin_node_id);
CREATE INDEX idx_snapshot_origin_sandbox ON t_cube_template_definition USING btree (origin_sandbox_id);
CREATE UNIQUE INDEX idx_template_definition_alias_unique ON t_cube_template_definition USING btree (alias_key);
CREATE INDEX idx_template_definition_rootfs_artifact ON t_cube_template_definition USING btree (rootfs_artifact_id, deleted_at, template_id);
CREATE INDEX idx_template_definition_status ON t_cube_template_definition USING btree (status);
CREATE UNIQUE INDEX idx_template_definition_template_id ON t_cube_template_definition USING btree (template_id);
CREATE UNIQUE INDEX idx_template_image_job_id ON t_cube_template_image_job USING btree (job_id);
CREATE INDEX idx_template_image_request_id ON t_cube_template_image_job USING btree (request_id);
CREATE UNIQUE INDEX idx_template_image_request_operation ON t_cube_template_image_job USING btree (request_id, operation);
CREATE INDEX idx_template_image_resource_status ON t_cube_template_image_job USING btree (resource_id, status);
CREATE INDEX idx_template_image_sandbox_status ON t_cube_template_image_job USING btree (sandbox_id, status);
CREATE INDEX idx_template_image_status ON t_cube_template_image_job USING btree (status);
CREATE UNIQUE INDEX idx_template_image_template_attempt ON t_cube_template_image_job USING btree (template_id, attempt_no);
CREATE INDEX idx_template_image_template_status ON t_cube_template_image_job USING btree (template_id, status);
CREATE INDEX idx_template_kind_status ON t_cube_template_definition USING btree (kind, status);
CREATE INDEX idx_template_replica_deleted_at ON t_cube_template_replica USING btree (deleted_at);
CREATE UNIQUE INDEX idx_template_replica_template_node ON t_cube_template_replica USING btree (template_id, node_id);
CREATE INDEX idx_template_replica_template_status ON t_cube_template_replica USING btree (template_id, status);
CREATE INDEX idx_template_storage_backend ON t_cube_template_definition USING btree (storage_backend);
