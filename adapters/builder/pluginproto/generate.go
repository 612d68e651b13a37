package pluginproto

// The generated files are committed so that a plain `go build` needs no
// protoc. Needs protoc, protoc-gen-go v1.36.12 and protoc-gen-go-grpc.
//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative builder.proto
