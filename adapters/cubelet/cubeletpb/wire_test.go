package cubeletpb

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// These tests pin the wire format to the upstream Cubelet field numbers. The
// bytes are built by hand with protowire from the numbers read in upstream's
// protos, never from our generated descriptors, so a renumbered field in our
// .proto files fails here.

// enc builds one message from (number, value) pairs.
type enc struct{ b []byte }

func (e *enc) str(num protowire.Number, s string) *enc {
	e.b = protowire.AppendTag(e.b, num, protowire.BytesType)
	e.b = protowire.AppendString(e.b, s)
	return e
}

func (e *enc) msg(num protowire.Number, m *enc) *enc {
	e.b = protowire.AppendTag(e.b, num, protowire.BytesType)
	e.b = protowire.AppendBytes(e.b, m.b)
	return e
}

func (e *enc) varint(num protowire.Number, v uint64) *enc {
	e.b = protowire.AppendTag(e.b, num, protowire.VarintType)
	e.b = protowire.AppendVarint(e.b, v)
	return e
}

// mapEntry appends one map<string,string> entry (key = 1, value = 2).
func (e *enc) mapEntry(num protowire.Number, k, v string) *enc {
	return e.msg(num, new(enc).str(1, k).str(2, v))
}

// fields is a decoded message: every occurrence of every field number, as
// raw bytes (length-delimited) or a varint.
type fields map[protowire.Number][]field

type field struct {
	varint uint64
	bytes  []byte
	typ    protowire.Type
}

func parse(t *testing.T, b []byte) fields {
	t.Helper()
	out := fields{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("bad tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		var f field
		f.typ = typ
		switch typ {
		case protowire.VarintType:
			f.varint, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			f.bytes, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			t.Fatalf("field %d: %v", num, protowire.ParseError(n))
		}
		b = b[n:]
		out[num] = append(out[num], f)
	}
	return out
}

func (f fields) str(t *testing.T, num protowire.Number) string {
	t.Helper()
	vs := f[num]
	if len(vs) != 1 || vs[0].typ != protowire.BytesType {
		t.Fatalf("field %d: want one length-delimited value, got %+v", num, vs)
	}
	return string(vs[0].bytes)
}

func (f fields) varint(t *testing.T, num protowire.Number) uint64 {
	t.Helper()
	vs := f[num]
	if len(vs) != 1 || vs[0].typ != protowire.VarintType {
		t.Fatalf("field %d: want one varint, got %+v", num, vs)
	}
	return vs[0].varint
}

func (f fields) sub(t *testing.T, num protowire.Number) fields {
	t.Helper()
	return parse(t, []byte(f.str(t, num)))
}

// stringMap decodes the repeated map entries of field num.
func (f fields) stringMap(t *testing.T, num protowire.Number) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, v := range f[num] {
		e := parse(t, v.bytes)
		m[e.str(t, 1)] = e.str(t, 2)
	}
	return m
}

func marshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func unmarshal(t *testing.T, b []byte, m proto.Message) {
	t.Helper()
	if err := proto.Unmarshal(b, m); err != nil {
		t.Fatal(err)
	}
	if len(m.ProtoReflect().GetUnknown()) != 0 {
		t.Fatalf("%T has unknown fields after decoding upstream bytes: a field number differs", m)
	}
}

func TestWireCreateImageRequest(t *testing.T) {
	// CreateImageRequest{requestID=1, spec=2}; ImageSpec{image=1,
	// annotations=2 (map), storage_media=3, namespace=6, runtime_handler=7}.
	spec := new(enc).str(1, "rfs-abc").
		mapEntry(2, "cube.master.rootfs.artifact.url", "http://tc/artifact?token=t").
		mapEntry(2, "cube.master.rootfs.artifact.sha256", "ABCDEF").
		str(3, "ext4").str(6, "default").str(7, "cube")
	wire := new(enc).str(1, "req-1").msg(2, spec).b

	var got CreateImageRequest
	unmarshal(t, wire, &got)
	if got.GetRequestID() != "req-1" || got.GetSpec().GetImage() != "rfs-abc" ||
		got.GetSpec().GetStorageMedia() != "ext4" || got.GetSpec().GetNamespace() != "default" ||
		got.GetSpec().GetRuntimeHandler() != "cube" {
		t.Fatalf("decoded %v", &got)
	}
	if got.GetSpec().GetAnnotations()["cube.master.rootfs.artifact.sha256"] != "ABCDEF" ||
		got.GetSpec().GetAnnotations()["cube.master.rootfs.artifact.url"] != "http://tc/artifact?token=t" {
		t.Fatalf("annotations %v", got.GetSpec().GetAnnotations())
	}

	// And back: our encoding parsed with upstream numbers.
	f := parse(t, marshal(t, &got))
	if f.str(t, 1) != "req-1" {
		t.Fatal("requestID not at field 1")
	}
	s := f.sub(t, 2)
	if s.str(t, 1) != "rfs-abc" || s.str(t, 3) != "ext4" || s.str(t, 6) != "default" || s.str(t, 7) != "cube" {
		t.Fatalf("spec fields %v", s)
	}
	if m := s.stringMap(t, 2); len(m) != 2 || m["cube.master.rootfs.artifact.sha256"] != "ABCDEF" {
		t.Fatalf("annotations on the wire %v", m)
	}

	// DestroyImageRequest has the same layout.
	var d DestroyImageRequest
	unmarshal(t, new(enc).str(1, "req-2").msg(2, new(enc).str(1, "rfs-abc")).b, &d)
	if d.GetRequestID() != "req-2" || d.GetSpec().GetImage() != "rfs-abc" {
		t.Fatalf("destroy decoded %v", &d)
	}
}

func TestWireRet(t *testing.T) {
	tests := []struct {
		name string
		code int32
		msg  string
	}{
		{"success", 200, ""},
		{"not exist", 130498, "app snapshot not exist"},
		{"unknown is negative", -1, "boom"},
		{"code we do not declare", 130999, "future"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Ret{ret_code=1 (enum, int32 varint), ret_msg=2}; negative
			// int32 is sign-extended to 64 bits on the wire.
			e := new(enc).varint(1, uint64(int64(tc.code)))
			if tc.msg != "" {
				e.str(2, tc.msg)
			}
			var r Ret
			unmarshal(t, e.b, &r)
			if int32(r.GetRetCode()) != tc.code || r.GetRetMsg() != tc.msg {
				t.Fatalf("decoded %v", &r)
			}
			f := parse(t, marshal(t, &r))
			if int32(f.varint(t, 1)) != tc.code {
				t.Fatalf("ret_code on the wire %d", int32(f.varint(t, 1)))
			}
			if tc.msg != "" && f.str(t, 2) != tc.msg {
				t.Fatal("ret_msg not at field 2")
			}
		})
	}
}

func TestWireCreateImageResponse(t *testing.T) {
	wire := new(enc).str(1, "req-1").msg(2, new(enc).varint(1, 130546).str(2, "download failed")).b
	var r CreateImageRequestResponse
	unmarshal(t, wire, &r)
	if r.GetRequestID() != "req-1" || r.GetRet().GetRetCode() != ErrorCode_CreateImageFailed || r.GetRet().GetRetMsg() != "download failed" {
		t.Fatalf("decoded %v", &r)
	}
	var d DestroyImageResponse
	unmarshal(t, wire, &d)
	if d.GetRet().GetRetCode() != 130546 {
		t.Fatalf("destroy response decoded %v", &d)
	}
}

func TestWireAppSnapshotResponse(t *testing.T) {
	// requestID=1, ret=2, sandboxID=3, templateID=4, snapshotPath=5,
	// rootfs_size_bytes=10 (uint64).
	wire := new(enc).str(1, "req-9").msg(2, new(enc).varint(1, 200).str(2, "ok")).
		str(3, "sb-1").str(4, "tpl-1").str(5, "/data/templates/tpl-1").varint(10, 1<<33).b
	var r AppSnapshotResponse
	unmarshal(t, wire, &r)
	if r.GetRequestID() != "req-9" || r.GetRet().GetRetCode() != ErrorCode_Success ||
		r.GetSandboxID() != "sb-1" || r.GetTemplateID() != "tpl-1" ||
		r.GetSnapshotPath() != "/data/templates/tpl-1" || r.GetRootfsSizeBytes() != 1<<33 {
		t.Fatalf("decoded %v", &r)
	}
	f := parse(t, marshal(t, &r))
	if f.str(t, 3) != "sb-1" || f.str(t, 4) != "tpl-1" || f.str(t, 5) != "/data/templates/tpl-1" || f.varint(t, 10) != 1<<33 {
		t.Fatalf("fields %v", f)
	}
	if f.sub(t, 2).varint(t, 1) != 200 {
		t.Fatal("ret not at field 2")
	}
}

func TestWireCleanupTemplate(t *testing.T) {
	// CleanupTemplateRequest{requestID=1, templateID=2, snapshotPath=3,
	// objects=4 CowObjectRef{name=1, kind=2, role=3}}.
	wire := new(enc).str(1, "req-c").str(2, "tpl-7").str(3, "/snap/tpl-7").
		msg(4, new(enc).str(1, "vol").str(2, "snapshot").str(3, "rootfs")).b
	var r CleanupTemplateRequest
	unmarshal(t, wire, &r)
	if r.GetRequestID() != "req-c" || r.GetTemplateID() != "tpl-7" || r.GetSnapshotPath() != "/snap/tpl-7" ||
		len(r.GetObjects()) != 1 || r.GetObjects()[0].GetRole() != "rootfs" {
		t.Fatalf("decoded %v", &r)
	}
	f := parse(t, marshal(t, &CleanupTemplateRequest{RequestID: "a", TemplateID: "b", SnapshotPath: "c"}))
	if f.str(t, 1) != "a" || f.str(t, 2) != "b" || f.str(t, 3) != "c" {
		t.Fatalf("fields %v", f)
	}

	// CleanupTemplateResponse{requestID=1, ret=2, templateID=3}.
	var resp CleanupTemplateResponse
	unmarshal(t, new(enc).str(1, "req-c").msg(2, new(enc).varint(1, 200)).str(3, "tpl-7").b, &resp)
	if resp.GetTemplateID() != "tpl-7" || resp.GetRet().GetRetCode() != ErrorCode_Success {
		t.Fatalf("response decoded %v", &resp)
	}
}

func TestWireAppSnapshotRequest(t *testing.T) {
	// A generated template create request, the way upstream lays it out.
	image := new(enc).str(1, "rfs-abc").str(3, "ext4").
		mapEntry(2, "cube.master.rootfs.artifact.id", "rfs-abc")
	container := new(enc).str(1, "cubebox-name-0").msg(2, image).
		str(3, "/bin/sh").str(4, "-c").str(4, "sleep 1").str(5, "/app").
		msg(6, new(enc).str(1, "PATH").str(2, "/usr/bin")).
		msg(7, new(enc).str(1, "cube_rootfs_rw").str(2, "/")).
		msg(8, new(enc).varint(1, 1000000)).
		msg(9, new(enc).str(1, "2000m").str(2, "2000Mi").str(3, "1").str(4, "1Gi")).
		msg(10, new(enc).varint(2, 1).varint(7, 0)).
		msg(11, new(enc).msg(1, new(enc).msg(1, new(enc).varint(1, 8080))).varint(2, 250).varint(3, 500).varint(7, 100)).
		msg(14, new(enc).str(1, "1.1.1.1")).
		mapEntry(15, "k", "v").
		str(19, "ctr-id")
	volume := new(enc).str(1, "cube_rootfs_rw").msg(2, new(enc).msg(1, new(enc).str(2, "20Gi")))
	packedPorts := protowire.AppendVarint(protowire.AppendVarint(nil, 8080), 32000)
	create := new(enc).str(1, "req-s").msg(7, volume).msg(8, container).
		mapEntry(9, "cube.master.appsnapshot.create", "true").
		mapEntry(10, "team", "a")
	create.b = protowire.AppendTag(create.b, 11, protowire.BytesType)
	create.b = protowire.AppendBytes(create.b, packedPorts)
	create.str(12, "cube").str(13, "cubebox").str(14, "tap").str(15, "ns").
		msg(16, new(enc).varint(1, 0).str(2, "10.0.0.0/8").str(3, "0.0.0.0/0"))
	wire := new(enc).msg(1, create).str(2, "/snap").b

	var r AppSnapshotRequest
	unmarshal(t, wire, &r)
	c := r.GetCreateRequest()
	if r.GetSnapshotDir() != "/snap" || c.GetRequestID() != "req-s" || c.GetRuntimeHandler() != "cube" ||
		c.GetInstanceType() != "cubebox" || c.GetNetworkType() != "tap" || c.GetNamespace() != "ns" ||
		c.GetLabels()["team"] != "a" || c.GetAnnotations()["cube.master.appsnapshot.create"] != "true" {
		t.Fatalf("decoded %v", &r)
	}
	if p := c.GetExposedPorts(); len(p) != 2 || p[0] != 8080 || p[1] != 32000 {
		t.Fatalf("exposed ports %v", p)
	}
	if n := c.GetCubeNetworkConfig(); n == nil || n.AllowInternetAccess == nil || n.GetAllowInternetAccess() ||
		n.GetAllowOut()[0] != "10.0.0.0/8" || n.GetDenyOut()[0] != "0.0.0.0/0" {
		t.Fatalf("network config %v", c.GetCubeNetworkConfig())
	}
	if v := c.GetVolumes(); len(v) != 1 || v[0].GetVolumeSource().GetEmptyDir().GetSizeLimit() != "20Gi" {
		t.Fatalf("volumes %v", v)
	}
	ctr := c.GetContainers()[0]
	if ctr.GetName() != "cubebox-name-0" || ctr.GetId() != "ctr-id" || ctr.GetImage().GetImage() != "rfs-abc" ||
		ctr.GetCommand()[0] != "/bin/sh" || len(ctr.GetArgs()) != 2 || ctr.GetWorkingDir() != "/app" ||
		ctr.GetEnvs()[0].GetValue() != "/usr/bin" || ctr.GetVolumeMounts()[0].GetContainerPath() != "/" ||
		ctr.GetRLimit().GetNoFile() != 1000000 || ctr.GetResources().GetMemLimit() != "1Gi" ||
		!ctr.GetSecurityContext().GetPrivileged() || ctr.GetProbe().GetProbeHandler().GetTcpSocket().GetPort() != 8080 ||
		ctr.GetProbe().GetTimeoutMs() != 500 || ctr.GetProbe().GetInitialDelayMs() != 250 || ctr.GetProbe().GetProbeTimeoutMs() != 100 ||
		ctr.GetDnsConfig().GetServers()[0] != "1.1.1.1" || ctr.GetAnnotations()["k"] != "v" {
		t.Fatalf("container %v", ctr)
	}

	// Back: our encoding of the same message carries the upstream numbers.
	f := parse(t, marshal(t, &r))
	if f.str(t, 2) != "/snap" {
		t.Fatal("snapshot_dir not at field 2")
	}
	cf := f.sub(t, 1)
	if cf.str(t, 1) != "req-s" || cf.str(t, 12) != "cube" || cf.str(t, 13) != "cubebox" || cf.str(t, 14) != "tap" || cf.str(t, 15) != "ns" {
		t.Fatalf("create request fields %v", cf)
	}
	if cf.sub(t, 16).varint(t, 1) != 0 || len(cf[16]) != 1 {
		t.Fatal("network config not at field 16")
	}
	cc := cf.sub(t, 8)
	if cc.str(t, 1) != "cubebox-name-0" || cc.str(t, 19) != "ctr-id" || cc.sub(t, 9).str(t, 4) != "1Gi" ||
		cc.sub(t, 10).varint(t, 2) != 1 || cc.sub(t, 8).varint(t, 1) != 1000000 || cc.sub(t, 2).str(t, 3) != "ext4" {
		t.Fatalf("container fields %v", cc)
	}
	if cf.sub(t, 7).sub(t, 2).sub(t, 1).str(t, 2) != "20Gi" {
		t.Fatal("empty_dir SizeLimit not at volumes(7).volume_source(2).empty_dir(1).SizeLimit(2)")
	}
}

// gRPC routes calls by "/<package>.<Service>/<Method>" and Any/registry
// lookups use message full names: both must be upstream's.
func TestUpstreamNames(t *testing.T) {
	names := map[string]string{
		Images_CreateImage_FullMethodName:         "/cubelet.services.images.v1.Images/CreateImage",
		Images_DestroyImage_FullMethodName:        "/cubelet.services.images.v1.Images/DestroyImage",
		CubeboxMgr_AppSnapshot_FullMethodName:     "/cubelet.services.cubebox.v1.CubeboxMgr/AppSnapshot",
		CubeboxMgr_CleanupTemplate_FullMethodName: "/cubelet.services.cubebox.v1.CubeboxMgr/CleanupTemplate",
	}
	for got, want := range names {
		if got != want {
			t.Errorf("method %s, want %s", got, want)
		}
	}
	msgs := map[proto.Message]string{
		&Ret{}:                        "cubelet.services.errorcode.v1.Ret",
		&ImageSpec{}:                  "cubelet.services.images.v1.ImageSpec",
		&CreateImageRequest{}:         "cubelet.services.images.v1.CreateImageRequest",
		&CreateImageRequestResponse{}: "cubelet.services.images.v1.CreateImageRequestResponse",
		&DestroyImageRequest{}:        "cubelet.services.images.v1.DestroyImageRequest",
		&DestroyImageResponse{}:       "cubelet.services.images.v1.DestroyImageResponse",
		&RunCubeSandboxRequest{}:      "cubelet.services.cubebox.v1.RunCubeSandboxRequest",
		&AppSnapshotRequest{}:         "cubelet.services.cubebox.v1.AppSnapshotRequest",
		&AppSnapshotResponse{}:        "cubelet.services.cubebox.v1.AppSnapshotResponse",
		&CleanupTemplateRequest{}:     "cubelet.services.cubebox.v1.CleanupTemplateRequest",
		&CleanupTemplateResponse{}:    "cubelet.services.cubebox.v1.CleanupTemplateResponse",
	}
	for m, want := range msgs {
		if got := string(m.ProtoReflect().Descriptor().FullName()); got != want {
			t.Errorf("message %s, want %s", got, want)
		}
	}
}
