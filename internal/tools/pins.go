//go:build tools

// Package tools pins modules the project builds on before every package that
// uses them exists, so that go.mod stays stable while work lands in parallel.
package tools

import (
	_ "entgo.io/ent"
	_ "entgo.io/ent/cmd/ent"
	_ "github.com/Microsoft/hcsshim/ext4/tar2ext4"
	_ "github.com/go-chi/chi/v5"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/google/go-containerregistry/pkg/registry"
	_ "github.com/google/uuid"
	_ "github.com/hashicorp/go-plugin"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/klauspost/compress/zstd"
	_ "github.com/klauspost/pgzip"
	_ "github.com/opencontainers/go-digest"
	_ "github.com/opencontainers/image-spec/specs-go/v1"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/redis/rueidis"
	_ "github.com/regclient/regclient"
	_ "github.com/samber/do/v2"
	_ "github.com/spf13/cobra"
	_ "gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob"
	_ "gocloud.dev/blob/gcsblob"
	_ "gocloud.dev/blob/memblob"
	_ "gocloud.dev/blob/s3blob"
	_ "google.golang.org/grpc"
	_ "google.golang.org/protobuf/proto"
	_ "gopkg.in/yaml.v3"
	_ "modernc.org/sqlite"
)
