package cubelet

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/cubesandbox/templatecenter/adapters/cubelet/cubeletpb"
	"github.com/cubesandbox/templatecenter/core"
)

// goldenCase is testdata/appsnapshot/<name>.case.json: the master
// settings and a stored sandbox request.
type goldenCase struct {
	About   string `json:"about"`
	Options struct {
		EnableExposedPort        bool              `json:"enable_exposed_port"`
		ExposedPortList          []string          `json:"exposed_port_list"`
		BlkQos                   string            `json:"blk_qos"`
		BlkQosMap                map[string]string `json:"blk_qos_map"`
		FsQos                    string            `json:"fs_qos"`
		FsQosMap                 map[string]string `json:"fs_qos_map"`
		Region                   string            `json:"region"`
		AllowedHostMountPrefixes []string          `json:"allowed_host_mount_prefixes"`
	} `json:"options"`
	Request json.RawMessage `json:"request"`
}

// TestAppSnapshotGolden pins the AppSnapshot request bytes. The expected
// files (<name>.golden.json, protojson of AppSnapshotRequest) were written
// by hand from upstream's ConstructCubeletReq (CubeMaster/pkg/service/
// sandbox/util.go), injectHostDirMounts (hostdir_mount.go),
// injectEnvdSidecar (envd_sidecar.go) and createReplicaOnNode (templatecenter/
// store.go); the test compares deterministic wire bytes.
func TestAppSnapshotGolden(t *testing.T) {
	cases, err := filepath.Glob("testdata/appsnapshot/*.case.json")
	if err != nil || len(cases) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	for _, path := range cases {
		name := strings.TrimSuffix(filepath.Base(path), ".case.json")
		t.Run(name, func(t *testing.T) {
			var gc goldenCase
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &gc); err != nil {
				t.Fatal(err)
			}
			req, dir, err := core.ParseSandboxRequest(gc.Request)
			if err != nil {
				t.Fatal(err)
			}
			before, _ := json.Marshal(req)
			o := RequestOptions{
				EnableExposedPort: gc.Options.EnableExposedPort, ExposedPortList: gc.Options.ExposedPortList,
				BlkQos: gc.Options.BlkQos, BlkQosByInstanceType: gc.Options.BlkQosMap,
				FsQos: gc.Options.FsQos, FsQosByInstanceType: gc.Options.FsQosMap,
				Region: gc.Options.Region, AllowedHostMountPrefixes: gc.Options.AllowedHostMountPrefixes,
			}
			run, err := o.RunRequest(req)
			if err != nil {
				t.Fatalf("RunRequest: %v", err)
			}
			got := &cubeletpb.AppSnapshotRequest{CreateRequest: run, SnapshotDir: dir, Backend: SnapshotBackend(req)}

			wantJSON, err := os.ReadFile(strings.TrimSuffix(path, ".case.json") + ".golden.json")
			if err != nil {
				t.Fatal(err)
			}
			want := &cubeletpb.AppSnapshotRequest{}
			if err := protojson.Unmarshal(wantJSON, want); err != nil {
				t.Fatalf("golden file: %v", err)
			}
			det := proto.MarshalOptions{Deterministic: true}
			gb, _ := det.Marshal(got)
			wb, _ := det.Marshal(want)
			if !bytes.Equal(gb, wb) {
				t.Errorf("request bytes differ from upstream's\n got: %s\nwant: %s", protojson.Format(got), protojson.Format(want))
			}
			if after, _ := json.Marshal(req); !bytes.Equal(before, after) {
				t.Error("RunRequest modified its input")
			}
		})
	}
}
