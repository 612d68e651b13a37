package cubelet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/cubesandbox/templatecenter/adapters/cubelet/cubeletpb"
	"github.com/cubesandbox/templatecenter/core"
)

// A core.SandboxRequest keeps the sub-objects the control plane only passes
// through as raw JSON (upstream's CreateCubeSandboxReq keys: snake_case,
// camelCase in the id mappings of a mount). The types below decode those
// pieces; RunRequest maps them onto the protobuf request field by field.

type sandboxPathJSON struct {
	Path string `json:"path"`
	Type string `json:"type"`
}

type hostDirVolumesJSON struct {
	VolumeSources []*struct {
		Name     string `json:"name"`
		HostPath string `json:"host_path"`
	} `json:"volume_sources"`
}

type imageVolumeJSON struct {
	Reference  *imageJSON `json:"reference"`
	PullPolicy enumJSON   `json:"pullPolicy"`
}

type imageJSON struct {
	Image          string            `json:"image"`
	Annotations    map[string]string `json:"annotations"`
	StorageMedia   string            `json:"storage_media"`
	Namespace      string            `json:"namespace"`
	RuntimeHandler string            `json:"runtime_handler"`
}

type httpGetJSON struct {
	Path        *string `json:"path"`
	Port        int32   `json:"port"`
	Host        *string `json:"host"`
	HTTPHeaders []*struct {
		Name  *string `json:"name"`
		Value *string `json:"value"`
	} `json:"http_headers"`
}

type lifecycleJSON struct {
	HTTPGet *httpGetJSON `json:"http_get"`
}

type int64ValueJSON struct {
	Value int64 `json:"value"`
}

type idMappingJSON struct {
	HostID      uint32 `json:"host_id"`
	ContainerID uint32 `json:"container_id"`
	Length      uint32 `json:"length"`
}

type volumeMountJSON struct {
	Name              string           `json:"name"`
	ContainerPath     string           `json:"container_path"`
	Readonly          bool             `json:"readonly"`
	Propagation       enumJSON         `json:"propagation"`
	UID               string           `json:"uid"`
	GID               string           `json:"gid"`
	Exec              bool             `json:"exec"`
	HostPath          string           `json:"host_path"`
	UIDMappings       []*idMappingJSON `json:"uidMappings"`
	GIDMappings       []*idMappingJSON `json:"gidMappings"`
	RecursiveReadOnly bool             `json:"recursive_read_only"`
	SelinuxRelabel    bool             `json:"selinux_relabel"`
	SubPath           string           `json:"sub_path"`
}

type securityContextJSON struct {
	Capabilities *struct {
		Add        []string `json:"add_capabilities"`
		Drop       []string `json:"drop_capabilities"`
		AddAmbient []string `json:"add_ambient_capabilities"`
	} `json:"capabilities"`
	Privileged     bool            `json:"privileged"`
	RunAsUser      *int64ValueJSON `json:"run_as_user"`
	NoNewPrivs     bool            `json:"no_new_privs"`
	RunAsGroup     *int64ValueJSON `json:"run_as_group"`
	RunAsUsername  string          `json:"run_as_username"`
	ReadonlyRootfs bool            `json:"readonly_rootfs"`
}

type probeJSON struct {
	ProbeHandler *struct {
		TCPSocket *struct {
			Port int32  `json:"port"`
			Host string `json:"host"`
		} `json:"tcp_socket"`
		Ping *struct {
			UDP bool `json:"udp"`
		} `json:"ping"`
		HTTPGet *httpGetJSON `json:"http_get"`
	} `json:"probe_handler"`
	InitialDelaySeconds int32 `json:"initial_delay_seconds"`
	TimeoutSeconds      int32 `json:"timeout_seconds"`
	InitialDelayMs      int32 `json:"initial_delay_ms"`
	TimeoutMs           int32 `json:"timeout_ms"`
	PeriodMs            int32 `json:"period_ms"`
	SuccessThreshold    int32 `json:"success_threshold"`
	FailureThreshold    int32 `json:"failure_threshold"`
	ProbeTimeoutMs      int32 `json:"probe_timeout_ms"`
}

type syscallJSON struct {
	Names  []string `json:"names"`
	Action string   `json:"action"`
	Errno  uint32   `json:"errno"`
	Args   []*struct {
		Index    uint32 `json:"index"`
		Value    uint64 `json:"value"`
		ValueTwo uint64 `json:"value_two"`
		Op       string `json:"op"`
	} `json:"args"`
}

type hostAliasJSON struct {
	Hostnames []string `json:"hostnames"`
	IP        string   `json:"ip"`
}

type prestopJSON struct {
	TerminationGracePeriodMs int32          `json:"termination_grace_period_ms"`
	LifecyleHandler          *lifecycleJSON `json:"lifecyle_handler"`
}

type poststopJSON struct {
	TimeoutMs       int32          `json:"timeout_ms"`
	LifecyleHandler *lifecycleJSON `json:"lifecyle_handler"`
}

type hooksJSON struct {
	Prestart []*struct {
		Path    string   `json:"path"`
		Args    []string `json:"args"`
		Env     []string `json:"env"`
		Timeout *int32   `json:"timeout"`
	} `json:"prestart"`
}

// decodeRaw decodes a pass-through sub-object into v; an absent one leaves
// v alone and reports false.
func decodeRaw(field string, raw json.RawMessage, v any) (bool, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return false, nil
	}
	if err := json.Unmarshal(t, v); err != nil {
		return false, &core.FieldError{Field: field, Reason: "malformed: " + err.Error()}
	}
	return true, nil
}

// enumJSON accepts a protobuf enum as its number (what upstream writes) or
// as its name ("StorageMediumMemory", "PROPAGATION_PRIVATE").
type enumJSON struct {
	num  int32
	name string
}

func (e *enumJSON) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &e.name)
	}
	return json.Unmarshal(b, &e.num)
}

// resolve returns the enum number, looking a name up in values.
func (e enumJSON) resolve(field string, values map[string]int32) (int32, error) {
	if e.name == "" {
		return e.num, nil
	}
	if v, ok := values[e.name]; ok {
		return v, nil
	}
	if n, err := strconv.ParseInt(e.name, 10, 32); err == nil {
		return int32(n), nil
	}
	return 0, &core.FieldError{Field: field, Reason: fmt.Sprintf("unknown value %q", e.name)}
}

// RunRequest maps a sandbox create request onto the Cubelet
// RunCubeSandboxRequest, the way the control plane builds it before
// AppSnapshot. What maps:
//
//   - request id, labels, instance_type, network_type, runtime_handler,
//     namespace: copied.
//   - annotations: copied whole; com.exposed_ports ("p1:p2") also becomes
//     exposed_ports.
//   - cubevs_context {allowInternetAccess, allowOut, denyOut} becomes
//     cube_network_config (field 16).
//   - volumes: empty_dir (medium, size_limit -> SizeLimit), sandbox_path,
//     host_dir_volumes, image.
//   - containers: name, id, image (image, storage_media, annotations,
//     namespace, runtime_handler), command, args, working_dir, envs,
//     volume_mounts, r_limit, resources (limit.cpu/mem -> cpu_limit/
//     mem_limit), security_context (always set, empty when absent), probe
//     (initial_delay_seconds/timeout_seconds are converted to ms unless the
//     ms fields are set), sysctls, syscalls, dns_config, annotations,
//     host_aliases, prestop/poststop (only with an http_get handler),
//     hooks.
//
// Bad input is a *core.FieldError naming the field.
func RunRequest(in *core.SandboxRequest) (*cubeletpb.RunCubeSandboxRequest, error) {
	if in == nil {
		return nil, &core.FieldError{Field: "create_request", Reason: "is empty"}
	}
	out := &cubeletpb.RunCubeSandboxRequest{
		RequestID:      in.RequestID,
		Annotations:    maps.Clone(in.Annotations),
		Labels:         maps.Clone(in.Labels),
		InstanceType:   in.InstanceType,
		NetworkType:    in.NetworkType,
		RuntimeHandler: in.RuntimeHandler,
		Namespace:      in.Namespace,
	}
	if n := in.CubeVSContext; n != nil {
		out.CubeNetworkConfig = &cubeletpb.CubeNetworkConfig{
			AllowInternetAccess: n.AllowInternetAccess,
			AllowOut:            n.AllowOut,
			DenyOut:             n.DenyOut,
		}
	}
	if p, ok := in.Annotations[core.AnnotationExposedPorts]; ok && p != "" {
		for _, s := range strings.Split(p, ":") {
			v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
			if err != nil || v < 1 || v > 65535 {
				return nil, &core.FieldError{Field: "annotations." + core.AnnotationExposedPorts, Reason: fmt.Sprintf("%q is not a port list like 8080:9000", p)}
			}
			out.ExposedPorts = append(out.ExposedPorts, v)
		}
	}
	for i := range in.Volumes {
		pv, err := volumeToProto(fmt.Sprintf("volumes[%d]", i), &in.Volumes[i])
		if err != nil {
			return nil, err
		}
		out.Volumes = append(out.Volumes, pv)
	}
	if len(in.Containers) == 0 {
		return nil, &core.FieldError{Field: "containers", Reason: "at least one container is required"}
	}
	for i := range in.Containers {
		pc, err := containerToProto(fmt.Sprintf("containers[%d]", i), &in.Containers[i])
		if err != nil {
			return nil, err
		}
		out.Containers = append(out.Containers, pc)
	}
	return out, nil
}

// RunRequestFromJSON parses the JSON of a sandbox create request and maps
// it with RunRequest. It returns the snapshot_dir the JSON carries (may be
// empty).
func RunRequestFromJSON(b []byte) (*cubeletpb.RunCubeSandboxRequest, string, error) {
	req, dir, err := core.ParseSandboxRequest(b)
	if err != nil {
		return nil, "", err
	}
	out, err := RunRequest(req)
	return out, dir, err
}

func volumeToProto(field string, v *core.Volume) (*cubeletpb.Volume, error) {
	if v.Name == "" {
		return nil, &core.FieldError{Field: field + ".name", Reason: "is required"}
	}
	if v.VolumeSource == nil {
		return nil, &core.FieldError{Field: field + ".volume_source", Reason: "is required"}
	}
	src := v.VolumeSource
	out := &cubeletpb.Volume{Name: v.Name, VolumeSource: &cubeletpb.VolumeSource{}}
	if e := src.EmptyDir; e != nil {
		var medium enumJSON
		if _, err := decodeRaw(field+".volume_source.empty_dir.medium", e.Medium, &medium); err != nil {
			return nil, err
		}
		m, err := medium.resolve(field+".volume_source.empty_dir.medium", cubeletpb.StorageMedium_value)
		if err != nil {
			return nil, err
		}
		out.VolumeSource.EmptyDir = &cubeletpb.EmptyDirVolumeSource{Medium: cubeletpb.StorageMedium(m), SizeLimit: e.SizeLimit}
	}
	var sp sandboxPathJSON
	if ok, err := decodeRaw(field+".volume_source.sandbox_path", src.SandboxPath, &sp); err != nil {
		return nil, err
	} else if ok {
		out.VolumeSource.SandboxPath = &cubeletpb.SandboxPathVolumeSource{Path: sp.Path, Type: sp.Type}
	}
	var h hostDirVolumesJSON
	if ok, err := decodeRaw(field+".volume_source.host_dir_volumes", src.HostDirVolumes, &h); err != nil {
		return nil, err
	} else if ok {
		hd := &cubeletpb.HostDirVolumeSources{}
		for j, s := range h.VolumeSources {
			f := fmt.Sprintf("%s.volume_source.host_dir_volumes.volume_sources[%d]", field, j)
			if s == nil || s.Name == "" {
				return nil, &core.FieldError{Field: f + ".name", Reason: "is required"}
			}
			if s.HostPath == "" {
				return nil, &core.FieldError{Field: f + ".host_path", Reason: "is required"}
			}
			hd.VolumeSources = append(hd.VolumeSources, &cubeletpb.HostDirSource{Name: s.Name, HostPath: s.HostPath})
		}
		out.VolumeSource.HostDirVolumes = hd
	}
	var im imageVolumeJSON
	if ok, err := decodeRaw(field+".volume_source.image", src.Image, &im); err != nil {
		return nil, err
	} else if ok {
		pp, err := im.PullPolicy.resolve(field+".volume_source.image.pullPolicy", cubeletpb.PullPolicy_value)
		if err != nil {
			return nil, err
		}
		out.VolumeSource.Image = &cubeletpb.ImageVolumeSource{Reference: imageToProto(im.Reference), PullPolicy: cubeletpb.PullPolicy(pp)}
	}
	return out, nil
}

func imageToProto(im *imageJSON) *cubeletpb.ImageSpec {
	if im == nil {
		return nil
	}
	return &cubeletpb.ImageSpec{
		Image:          im.Image,
		Annotations:    im.Annotations,
		StorageMedia:   im.StorageMedia,
		Namespace:      im.Namespace,
		RuntimeHandler: im.RuntimeHandler,
	}
}

func httpGetToProto(h *httpGetJSON) *cubeletpb.HTTPGetAction {
	if h == nil {
		return nil
	}
	out := &cubeletpb.HTTPGetAction{Path: h.Path, Port: h.Port, Host: h.Host}
	for _, hd := range h.HTTPHeaders {
		if hd != nil {
			out.HttpHeaders = append(out.HttpHeaders, &cubeletpb.HTTPHeader{Name: hd.Name, Value: hd.Value})
		}
	}
	return out
}

func idMappings(in []*idMappingJSON) []*cubeletpb.IDMapping {
	var out []*cubeletpb.IDMapping
	for _, m := range in {
		if m != nil {
			out = append(out, &cubeletpb.IDMapping{HostId: m.HostID, ContainerId: m.ContainerID, Length: m.Length})
		}
	}
	return out
}

func containerToProto(field string, c *core.Container) (*cubeletpb.ContainerConfig, error) {
	if c.Image == nil || c.Image.Image == "" {
		return nil, &core.FieldError{Field: field + ".image.image", Reason: "is required"}
	}
	if c.Resources == nil {
		return nil, &core.FieldError{Field: field + ".resources", Reason: "is required (cpu and mem)"}
	}
	out := &cubeletpb.ContainerConfig{
		Name:        c.Name,
		Id:          c.ID,
		Image:       sandboxImageToProto(c.Image),
		Command:     c.Command,
		Args:        c.Args,
		WorkingDir:  c.WorkingDir,
		Sysctls:     c.Sysctls,
		Annotations: c.Annotations,
		Resources:   &cubeletpb.Resource{Cpu: c.Resources.CPU, Mem: c.Resources.Mem},
	}
	if l := c.Resources.Limit; l != nil {
		out.Resources.CpuLimit, out.Resources.MemLimit = l.CPU, l.Mem
	}
	for j, e := range c.Envs {
		if e == nil || e.Key == "" {
			return nil, &core.FieldError{Field: fmt.Sprintf("%s.envs[%d].key", field, j), Reason: "is required"}
		}
		out.Envs = append(out.Envs, &cubeletpb.KeyValue{Key: e.Key, Value: e.Value})
	}
	for j, raw := range c.VolumeMounts {
		f := fmt.Sprintf("%s.volume_mounts[%d]", field, j)
		var m volumeMountJSON
		if ok, err := decodeRaw(f, raw, &m); err != nil {
			return nil, err
		} else if !ok || m.Name == "" || m.ContainerPath == "" {
			return nil, &core.FieldError{Field: f, Reason: "name and container_path are required"}
		}
		prop, err := m.Propagation.resolve(f+".propagation", cubeletpb.MountPropagation_value)
		if err != nil {
			return nil, err
		}
		out.VolumeMounts = append(out.VolumeMounts, &cubeletpb.VolumeMounts{
			Name: m.Name, ContainerPath: m.ContainerPath, Readonly: m.Readonly,
			Propagation: cubeletpb.MountPropagation(prop), Uid: m.UID, Gid: m.GID, Exec: m.Exec,
			HostPath: m.HostPath, UidMappings: idMappings(m.UIDMappings), GidMappings: idMappings(m.GIDMappings),
			RecursiveReadOnly: m.RecursiveReadOnly, SelinuxRelabel: m.SelinuxRelabel, SubPath: m.SubPath,
		})
	}
	if c.RLimit != nil {
		out.RLimit = &cubeletpb.RLimit{NoFile: c.RLimit.NoFile}
	}
	// The Cubelet expects a security context on every container.
	out.SecurityContext = &cubeletpb.ContainerSecurityContext{}
	var s securityContextJSON
	if ok, err := decodeRaw(field+".security_context", c.SecurityContext, &s); err != nil {
		return nil, err
	} else if ok {
		out.SecurityContext.Privileged = s.Privileged
		out.SecurityContext.NoNewPrivs = s.NoNewPrivs
		out.SecurityContext.RunAsUsername = s.RunAsUsername
		out.SecurityContext.ReadonlyRootfs = s.ReadonlyRootfs
		if s.RunAsUser != nil {
			out.SecurityContext.RunAsUser = &cubeletpb.Int64Value{Value: s.RunAsUser.Value}
		}
		if s.RunAsGroup != nil {
			out.SecurityContext.RunAsGroup = &cubeletpb.Int64Value{Value: s.RunAsGroup.Value}
		}
		if cp := s.Capabilities; cp != nil {
			out.SecurityContext.Capabilities = &cubeletpb.Capability{AddCapabilities: cp.Add, DropCapabilities: cp.Drop, AddAmbientCapabilities: cp.AddAmbient}
		}
	}
	var p probeJSON
	if ok, err := decodeRaw(field+".probe", c.Probe, &p); err != nil {
		return nil, err
	} else if ok {
		if p.ProbeHandler == nil {
			return nil, &core.FieldError{Field: field + ".probe.probe_handler", Reason: "is required when probe is set"}
		}
		pr := &cubeletpb.Probe{
			ProbeHandler:     &cubeletpb.ProbeHandler{},
			PeriodMs:         p.PeriodMs,
			SuccessThreshold: p.SuccessThreshold,
			FailureThreshold: p.FailureThreshold,
			ProbeTimeoutMs:   p.ProbeTimeoutMs,
			InitialDelayMs:   p.InitialDelaySeconds * 1000,
			TimeoutMs:        p.TimeoutSeconds * 1000,
		}
		// Millisecond values win over the second-based ones.
		if p.InitialDelayMs != 0 {
			pr.InitialDelayMs = p.InitialDelayMs
		}
		if p.TimeoutMs != 0 {
			pr.TimeoutMs = p.TimeoutMs
		}
		// One handler only, in the Cubelet's order of preference.
		switch h := p.ProbeHandler; {
		case h.TCPSocket != nil:
			pr.ProbeHandler.TcpSocket = &cubeletpb.TCPSocketAction{Port: h.TCPSocket.Port, Host: h.TCPSocket.Host}
		case h.Ping != nil:
			pr.ProbeHandler.Ping = &cubeletpb.PingAction{Udp: h.Ping.UDP}
		case h.HTTPGet != nil:
			pr.ProbeHandler.HttpGet = httpGetToProto(h.HTTPGet)
		}
		out.Probe = pr
	}
	var syscalls []*syscallJSON
	if _, err := decodeRaw(field+".syscalls", c.Syscalls, &syscalls); err != nil {
		return nil, err
	}
	for _, s := range syscalls {
		if s == nil {
			continue
		}
		sc := &cubeletpb.SysCall{Names: s.Names, Action: s.Action, Errno: s.Errno}
		for _, a := range s.Args {
			if a != nil {
				sc.Args = append(sc.Args, &cubeletpb.LinuxSeccompArg{Index: a.Index, Value: a.Value, ValueTwo: a.ValueTwo, Op: a.Op})
			}
		}
		out.Syscalls = append(out.Syscalls, sc)
	}
	if d := c.DNSConfig; d != nil {
		out.DnsConfig = &cubeletpb.DNSConfig{Servers: d.Servers, Searches: d.Searches, Options: d.Options}
	}
	var aliases []*hostAliasJSON
	if _, err := decodeRaw(field+".host_aliases", c.HostAliases, &aliases); err != nil {
		return nil, err
	}
	for _, a := range aliases {
		if a != nil {
			out.HostAliases = append(out.HostAliases, &cubeletpb.HostAlias{Hostnames: a.Hostnames, Ip: a.IP})
		}
	}
	var pre prestopJSON
	if _, err := decodeRaw(field+".prestop", c.Prestop, &pre); err != nil {
		return nil, err
	}
	if p := pre; p.LifecyleHandler != nil && p.LifecyleHandler.HTTPGet != nil {
		out.Prestop = &cubeletpb.PreStop{
			TerminationGracePeriodMs: p.TerminationGracePeriodMs,
			LifecyleHandler:          &cubeletpb.LifecycleHandler{HttpGet: httpGetToProto(p.LifecyleHandler.HTTPGet)},
		}
	}
	var post poststopJSON
	if _, err := decodeRaw(field+".poststop", c.Poststop, &post); err != nil {
		return nil, err
	}
	if p := post; p.LifecyleHandler != nil && p.LifecyleHandler.HTTPGet != nil {
		out.Poststop = &cubeletpb.PostStop{
			TimeoutMs:       p.TimeoutMs,
			LifecyleHandler: &cubeletpb.LifecycleHandler{HttpGet: httpGetToProto(p.LifecyleHandler.HTTPGet)},
		}
	}
	var h hooksJSON
	if ok, err := decodeRaw(field+".hooks", c.Hooks, &h); err != nil {
		return nil, err
	} else if ok {
		out.Hooks = &cubeletpb.Hooks{}
		for _, hk := range h.Prestart {
			if hk != nil {
				out.Hooks.Prestart = append(out.Hooks.Prestart, &cubeletpb.Hook{Path: hk.Path, Args: hk.Args, Env: hk.Env, Timeout: hk.Timeout})
			}
		}
	}
	return out, nil
}

func sandboxImageToProto(im *core.SandboxImage) *cubeletpb.ImageSpec {
	return &cubeletpb.ImageSpec{
		Image:          im.Image,
		Annotations:    im.Annotations,
		StorageMedia:   im.StorageMedia,
		Namespace:      im.Namespace,
		RuntimeHandler: im.RuntimeHandler,
	}
}
