package cubelet

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/adapters/cubelet/cubeletpb"
	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports/nodeagenttest"
)

func TestRunRequestFromGeneratedJSON(t *testing.T) {
	b, err := os.ReadFile("testdata/generated_request.json")
	if err != nil {
		t.Fatal(err)
	}
	r, dir, err := RunRequestFromJSON(b)
	if err != nil {
		t.Fatalf("RunRequestFromJSON: %v", err)
	}
	if dir != "/data/snap" {
		t.Errorf("snapshot dir %q", dir)
	}
	if r.RequestID != "req-gen-1" || r.InstanceType != "cubebox" || r.NetworkType != "tap" ||
		r.RuntimeHandler != "cube" || r.Namespace != "tenant-a" || r.Labels["team"] != "infra" {
		t.Errorf("top level: %v", r)
	}
	// 9 from the request plus the four the master always sets.
	if len(r.Annotations) != 13 || r.Annotations["cube.master.appsnapshot.template.id"] != "tpl-0123456789abcdef01234567" ||
		r.Annotations[core.AnnotationUseNetfileCache] != "true" {
		t.Errorf("annotations %v", r.Annotations)
	}
	if !slices.Equal(r.ExposedPorts, []int64{8080, 9000}) {
		t.Errorf("exposed ports %v", r.ExposedPorts)
	}
	n := r.CubeNetworkConfig
	if n == nil || n.AllowInternetAccess == nil || *n.AllowInternetAccess || n.AllowOut[0] != "10.0.0.0/8" || n.DenyOut[0] != "0.0.0.0/0" {
		t.Errorf("network %v", n)
	}

	if len(r.Volumes) != 4 {
		t.Fatalf("volumes %v", r.Volumes)
	}
	if v := r.Volumes[0]; v.Name != "cube_rootfs_rw" || v.VolumeSource.EmptyDir.SizeLimit != "20Gi" || v.VolumeSource.EmptyDir.Medium != cubeletpb.StorageMedium_StorageMediumDefault {
		t.Errorf("rootfs volume %v", v)
	}
	if v := r.Volumes[1]; v.VolumeSource.EmptyDir.Medium != cubeletpb.StorageMedium_StorageMediumMemory {
		t.Errorf("memory medium by name: %v", v)
	}
	if v := r.Volumes[2]; v.VolumeSource.HostDirVolumes.VolumeSources[0].HostPath != "/data/shared/code" {
		t.Errorf("host dir volume %v", v)
	}
	if v := r.Volumes[3]; v.VolumeSource.SandboxPath.Type != "Cgroup" {
		t.Errorf("sandbox path volume %v", v)
	}

	c := r.Containers[0]
	if c.Name != "cubebox-name-0" || c.Image.Image != "rfs-abc" || c.Image.StorageMedia != "ext4" ||
		c.Image.Annotations[core.AnnotationArtifactURL] == "" {
		t.Errorf("image %v", c.Image)
	}
	if !slices.Equal(c.Command, []string{"/docker-entrypoint.sh"}) || len(c.Args) != 3 || c.WorkingDir != "/app" {
		t.Errorf("process %v %v %q", c.Command, c.Args, c.WorkingDir)
	}
	if len(c.Envs) != 2 || c.Envs[1].Key != "PATH" || c.Envs[1].Value != "/usr/bin" {
		t.Errorf("envs %v", c.Envs)
	}
	if m := c.VolumeMounts; len(m) != 3 || m[0].ContainerPath != "/" ||
		m[1].Propagation != cubeletpb.MountPropagation_PROPAGATION_HOST_TO_CONTAINER || m[1].UidMappings[0].HostId != 1000 ||
		// "code" mounts a host directory: forced private, recursively read-only.
		m[2].Propagation != cubeletpb.MountPropagation_PROPAGATION_PRIVATE || !m[2].Readonly || !m[2].RecursiveReadOnly {
		t.Errorf("mounts %v", m)
	}
	if res := c.Resources; res.Cpu != "2000m" || res.Mem != "2000Mi" || res.CpuLimit != "1" || res.MemLimit != "1Gi" {
		t.Errorf("resources %v", res)
	}
	if s := c.SecurityContext; !s.Privileged || s.ReadonlyRootfs || s.RunAsUser == nil || s.RunAsUser.Value != 0 || s.Capabilities.AddCapabilities[0] != "NET_ADMIN" {
		t.Errorf("security context %v", s)
	}
	if c.RLimit.NoFile != 1000000 {
		t.Errorf("rlimit %v", c.RLimit)
	}
	// Seconds are converted, explicit milliseconds win.
	if p := c.Probe; p.InitialDelayMs != 2000 || p.TimeoutMs != 750 || p.PeriodMs != 500 || p.FailureThreshold != 5 ||
		p.ProbeHandler.HttpGet.GetPath() != "/healthz" || p.ProbeHandler.HttpGet.Port != 8080 ||
		p.ProbeHandler.HttpGet.HttpHeaders[0].GetName() != "X-A" || p.ProbeHandler.TcpSocket != nil {
		t.Errorf("probe %v", p)
	}
	if c.DnsConfig.Servers[0] != "1.1.1.1" || c.DnsConfig.Searches[0] != "svc.local" {
		t.Errorf("dns %v", c.DnsConfig)
	}
	if c.Annotations["com.example/owner"] != "me" || c.Sysctls["net.core.somaxconn"] != "1024" {
		t.Errorf("annotations %v sysctls %v", c.Annotations, c.Sysctls)
	}
	if s := c.Syscalls[0]; s.Names[0] != "ptrace" || s.Errno != 1 || s.Args[0].ValueTwo != 8 || s.Args[0].Op != "SCMP_CMP_EQ" {
		t.Errorf("syscalls %v", s)
	}
	if c.HostAliases[0].Ip != "10.0.0.5" || c.HostAliases[0].Hostnames[0] != "db" {
		t.Errorf("host aliases %v", c.HostAliases)
	}
	if c.Prestop.TerminationGracePeriodMs != 3000 || c.Prestop.LifecyleHandler.HttpGet.GetPath() != "/stop" {
		t.Errorf("prestop %v", c.Prestop)
	}
	if c.Poststop != nil {
		t.Errorf("poststop without a handler should be dropped, got %v", c.Poststop)
	}
	if h := c.Hooks.Prestart[0]; h.Path != "/bin/true" || h.GetTimeout() != 5 {
		t.Errorf("hooks %v", c.Hooks)
	}
}

func TestRunRequestFromSuiteRequest(t *testing.T) {
	r, _, err := RunRequestFromJSON(nodeagenttest.CreateRequestJSON("tpl-1", "rfs-1", "cubebox"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Annotations[core.AnnotationAppSnapshotCreate] != "true" || r.Containers[0].Image.Image != "rfs-1" ||
		r.Containers[0].SecurityContext == nil || !slices.Equal(r.ExposedPorts, []int64{8080, 32000}) {
		t.Fatalf("converted %v", r)
	}
}

func TestRunRequestFromJSONRejects(t *testing.T) {
	const ctr = `"annotations":{},"containers":[{"image":{"image":"rfs-1","storage_media":"ext4"},"resources":{"cpu":"1","mem":"1Gi"}}]`
	const ann = `"annotations":{},`
	tests := []struct {
		name, json, field string
	}{
		{"empty", ``, "create_request"},
		{"not json", `{"containers":`, "create_request"},
		{"no containers", `{"annotations":{}}`, "containers"},
		{"no annotations", `{"containers":[{"image":{"image":"x"},"resources":{}}]}`, "annotations"},
		{"empty net id", `{"annotations":{"com.netid":""},"containers":[{"image":{"image":"x"},"resources":{}}]}`, "annotations.com.netid"},
		{"no image", `{` + ann + `"containers":[{"resources":{"cpu":"1","mem":"1"}}]}`, "containers[0].image"},
		{"nfs image", `{` + ann + `"containers":[{"image":{"image":"x","storage_media":"nfs"},"resources":{}}]}`, "containers[0].image.storage_media"},
		{"no resources", `{` + ann + `"containers":[{"image":{"image":"x"}}]}`, "containers[0].resources"},
		{"bad ports", `{"annotations":{"com.exposed_ports":"80:x"},"containers":[{"image":{"image":"x"},"resources":{}}]}`, "annotations.com.exposed_ports"},
		{"trailing colon", `{"annotations":{"com.exposed_ports":"80:"},"containers":[{"image":{"image":"x"},"resources":{}}]}`, "annotations.com.exposed_ports"},
		{"relative host mount", `{"annotations":{"host-mount":"[{\"hostPath\":\"rel\",\"mountPath\":\"/m\"}]"},"containers":[{"image":{"image":"x"},"resources":{}}]}`, "annotations.host-mount[0].hostPath"},
		{"host mount outside the prefixes", `{"annotations":{"host-mount":"[{\"hostPath\":\"/data/shared/../../etc\",\"mountPath\":\"/m\"}]"},"containers":[{"image":{"image":"x"},"resources":{}}]}`, "annotations.host-mount[0].hostPath"},
		{"plugin volumes", `{"annotations":{"plugin-volume-mounts":"[{\"name\":\"v\"}]"},"containers":[{"image":{"image":"x"},"resources":{}}]}`, "annotations.plugin-volume-mounts"},
		{"volume without name", `{"volumes":[{"volume_source":{}}],` + ctr + `}`, "volumes[0].name"},
		{"volume without source", `{"volumes":[{"name":"v"}],` + ctr + `}`, "volumes[0].volume_source"},
		{"host dir without path", `{"volumes":[{"name":"v","volume_source":{"host_dir_volumes":{"volume_sources":[{"name":"s"}]}}}],` + ctr + `}`, "volumes[0].volume_source.host_dir_volumes.volume_sources[0].host_path"},
		{"relative host dir", `{"volumes":[{"name":"v","volume_source":{"host_dir_volumes":{"volume_sources":[{"name":"s","host_path":"x/y"}]}}}],` + ctr + `}`, "volumes[0].volume_source.host_dir_volumes.volume_sources[0].host_path"},
		{"host dir outside the prefixes", `{"volumes":[{"name":"v","volume_source":{"host_dir_volumes":{"volume_sources":[{"name":"s","host_path":"/etc"}]}}}],` + ctr + `}`, "volumes[0].volume_source.host_dir_volumes.volume_sources[0].host_path"},
		{"unknown medium", `{"volumes":[{"name":"v","volume_source":{"empty_dir":{"medium":"Floppy"}}}],` + ctr + `}`, "volumes[0].volume_source.empty_dir.medium"},
		{"mount without path", `{` + ann + `"containers":[{"image":{"image":"x"},"resources":{},"volume_mounts":[{"name":"v"}]}]}`, "containers[0].volume_mounts[0]"},
		{"probe without handler", `{` + ann + `"containers":[{"image":{"image":"x"},"resources":{},"probe":{"period_ms":1}}]}`, "containers[0].probe.probe_handler"},
		{"null env", `{` + ann + `"containers":[{"image":{"image":"x"},"resources":{},"envs":[null]}]}`, "containers[0].envs[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := RunRequestFromJSON([]byte(tc.json))
			var fe *core.FieldError
			if !errors.As(err, &fe) || !errors.Is(err, core.ErrInvalidArgument) {
				t.Fatalf("err = %v, want a *core.FieldError", err)
			}
			if fe.Field != tc.field {
				t.Fatalf("field %q, want %q (%v)", fe.Field, tc.field, err)
			}
			if strings.TrimSpace(fe.Reason) == "" {
				t.Fatal("no reason")
			}
		})
	}
}

// A prefix names a directory: the directory itself and what is below it,
// never a sibling sharing its leading characters.
func TestHostPathPrefixes(t *testing.T) {
	tests := []struct {
		name, prefix, path, want string // want "" means rejected
	}{
		{"below, slash prefix", "/data/shared/", "/data/shared/code", "/data/shared/code"},
		{"below, bare prefix", "/data/shared", "/data/shared/code", "/data/shared/code"},
		{"the dir, slash prefix", "/data/shared/", "/data/shared", "/data/shared"},
		{"the dir, bare prefix", "/data/shared", "/data/shared/", "/data/shared"},
		{"sibling dir, bare prefix", "/data/shared", "/data/shared-evil/x", ""},
		{"sibling name, bare prefix", "/data/shared", "/data/sharedfoo", ""},
		{"sibling dir, slash prefix", "/data/shared/", "/data/shared-evil/x", ""},
		{"uncleaned prefix", "/data//shared/./", "/data/shared/x", "/data/shared/x"},
		{"uncleaned prefix, sibling", "/data//shared", "/data/shared-evil", ""},
		{"traversal out", "/data/shared", "/data/shared/../../etc", ""},
		{"root prefix", "/", "/etc/x", "/etc/x"},
		{"parent of prefix", "/data/shared", "/data", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := RequestOptions{AllowedHostMountPrefixes: []string{tc.prefix}}
			got, err := o.hostPath("f", tc.path)
			if tc.want == "" {
				if !errors.Is(err, core.ErrInvalidArgument) {
					t.Fatalf("hostPath(%q) under %q = %q, %v; want rejected", tc.path, tc.prefix, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("hostPath(%q) under %q = %q, %v; want %q", tc.path, tc.prefix, got, err, tc.want)
			}
		})
	}
}
