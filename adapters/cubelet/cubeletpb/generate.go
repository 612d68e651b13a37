package cubeletpb

// The .proto files are imported as "cubeletpb/<name>.proto", so protoc runs
// with the parent directory as its include root. Needs protoc plus
// protoc-gen-go v1.36.12 and protoc-gen-go-grpc on PATH.
//go:generate protoc -I .. --go_out=.. --go_opt=paths=source_relative --go-grpc_out=.. --go-grpc_opt=paths=source_relative cubeletpb/errorcode.proto cubeletpb/images.proto cubeletpb/cubebox.proto
