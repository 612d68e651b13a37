package cubelet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
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
	VolumeSources []*hostDirSourceJSON `json:"volume_sources"`
}

type hostDirSourceJSON struct {
	Name     string `json:"name"`
	HostPath string `json:"host_path"`
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
	Readonly          bool             `json:"readonly,omitempty"`
	Propagation       enumJSON         `json:"propagation,omitzero"`
	UID               string           `json:"uid,omitempty"`
	GID               string           `json:"gid,omitempty"`
	Exec              bool             `json:"exec,omitempty"`
	HostPath          string           `json:"host_path,omitempty"`
	UIDMappings       []*idMappingJSON `json:"uidMappings,omitempty"`
	GIDMappings       []*idMappingJSON `json:"gidMappings,omitempty"`
	RecursiveReadOnly bool             `json:"recursive_read_only,omitempty"`
	SelinuxRelabel    bool             `json:"selinux_relabel,omitempty"`
	SubPath           string           `json:"sub_path,omitempty"`
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

// RequestOptions are the master settings that shape every request sent to
// a node (upstream conf.yaml cubelet_conf, extra_conf and log).
type RequestOptions struct {
	// EnableExposedPort turns on exposed ports (cubelet_conf
	// enable_exposed_port): the request's com.exposed_ports annotation
	// ("p1:p2"), else ExposedPortList. With it off only the envd port is
	// exposed.
	EnableExposedPort bool
	ExposedPortList   []string
	// BlkQos and FsQos become cube.master.blk.qos / cube.master.fs.qos;
	// the per-instance-type maps win when they name the request's type
	// (extra_conf blk_qos, blk_qos_map, fs_qos, fs_qos_map).
	BlkQos               string
	BlkQosByInstanceType map[string]string
	FsQos                string
	FsQosByInstanceType  map[string]string
	// Region fills cube.master.instance.region when the request has none
	// (log.region).
	Region string
	// AllowedHostMountPrefixes bound host-dir volume paths: each is a
	// directory (with or without a trailing "/"), and a cleaned path must
	// be one of them or below one.
	AllowedHostMountPrefixes []string
}

// DefaultHostMountPrefix is the host directory upstream documents as the
// default allowed host-mount prefix.
const DefaultHostMountPrefix = "/data/shared/"

// DefaultRequestOptions are upstream's shipped settings: both the
// single-node and the Helm conf.yaml enable exposed ports with port 80.
func DefaultRequestOptions() RequestOptions {
	return RequestOptions{EnableExposedPort: true, ExposedPortList: []string{"80"}, AllowedHostMountPrefixes: []string{DefaultHostMountPrefix}}
}

// hostPath cleans an absolute host path and checks it against the allowed
// prefixes (upstream validateHostPath).
func (o RequestOptions) hostPath(field, p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", &core.FieldError{Field: field, Reason: "must be an absolute path"}
	}
	cleaned := path.Clean(p)
	for _, prefix := range o.AllowedHostMountPrefixes {
		// Both sides end in one "/", so "/data/shared" admits itself and
		// what is below it but not "/data/shared-evil".
		dir := path.Clean(prefix)
		if dir != "/" {
			dir += "/"
		}
		if strings.HasPrefix(cleaned+"/", dir) {
			return cleaned, nil
		}
	}
	return "", &core.FieldError{Field: field, Reason: fmt.Sprintf("%q is not within an allowed host mount prefix %v", p, o.AllowedHostMountPrefixes)}
}

// maxCreateTimeEnvBytes bounds the create-time env annotation.
const maxCreateTimeEnvBytes = 16 * 1024

// RunRequest maps a sandbox create request onto the Cubelet
// RunCubeSandboxRequest with DefaultRequestOptions.
func RunRequest(in *core.SandboxRequest) (*cubeletpb.RunCubeSandboxRequest, error) {
	return DefaultRequestOptions().RunRequest(in)
}

// RunRequest maps a sandbox create request onto the Cubelet
// RunCubeSandboxRequest the way upstream's master builds it before Create
// and AppSnapshot (ConstructCubeletReq), so a node sees the same request
// from either master:
//
//   - request id, labels, instance_type, network_type, runtime_handler,
//     namespace: copied. backend: normalized (xfs, s3) and also sent as
//     cube.master.storage.backend; an unknown backend is left out.
//   - the network policy (cube_network_config, else cubevs_context) maps
//     to field 16 with its L7 rules; ingress-only fields stay behind.
//   - annotations (required): com.netid must not be empty; com.vips is
//     copied to cube.master.vips; cube.master.blk.qos and
//     cube.master.fs.qos are always set (possibly empty); cube.master* and
//     cloud.tencent.com* annotations are copied; cube.instance.
//     use_netfile_cache is "true"; cube.master.instance.region is the
//     configured region when the request has none; create_time_env_vars
//     become one JSON annotation (at most 16 KiB). After the volumes, every
//     other request annotation is added unless already set.
//   - host-mount entries become host-dir volumes hostdir-<i> mounted in
//     every container; plugin volumes are refused.
//   - with cube.master.inject_envd="true" (cubebox instances), the first
//     container's entrypoint is wrapped to start envd and port 49983 is
//     exposed first.
//   - volumes: empty_dir, sandbox_path, host_dir_volumes (paths cleaned
//     and within AllowedHostMountPrefixes), image.
//   - containers: image (image, storage_media, annotations plus the
//     registry name/token annotations; nfs is refused), command, args,
//     working_dir, envs, volume_mounts (host-dir mounts are forced
//     private, non-exec, recursively read-only when read-only), r_limit,
//     resources (limit.cpu/mem -> cpu_limit/mem_limit), security_context
//     (always set), probe (second-based values converted to ms unless the
//     ms fields are set), sysctls, syscalls, dns_config, annotations
//     (keys starting cube., com.netid, com.invoke_port, com.exposed_ports
//     or com.vips are dropped unless they start cube.master), host
//     aliases, prestop/poststop (only with an http_get handler), hooks.
//   - exposed ports: see EnableExposedPort; duplicates are dropped.
//
// in is not modified. Bad input is a *core.FieldError naming the field.
func (o RequestOptions) RunRequest(in *core.SandboxRequest) (*cubeletpb.RunCubeSandboxRequest, error) {
	if in == nil {
		return nil, &core.FieldError{Field: "create_request", Reason: "is empty"}
	}
	if len(in.Containers) == 0 {
		return nil, &core.FieldError{Field: "containers", Reason: "at least one container is required"}
	}
	req := cloneSandboxRequest(in)
	out := &cubeletpb.RunCubeSandboxRequest{
		RequestID:         req.RequestID,
		Labels:            req.Labels,
		InstanceType:      req.InstanceType,
		NetworkType:       req.NetworkType,
		Annotations:       map[string]string{},
		RuntimeHandler:    req.RuntimeHandler,
		Namespace:         req.Namespace,
		CubeNetworkConfig: networkConfigToProto(req.NetworkPolicy()),
	}
	if strings.TrimSpace(req.Backend) != "" {
		if b, err := core.NormalizeBackend(req.Backend); err == nil {
			out.Backend = b
			out.Annotations[core.AnnotationStorageBackend] = b
		}
	}
	if err := o.annotations(req, out); err != nil {
		return nil, err
	}
	if err := o.injectHostMounts(req); err != nil {
		return nil, err
	}
	if v := req.Annotations[core.AnnotationPluginVolumeMounts]; strings.TrimSpace(v) != "" {
		return nil, &core.FieldError{Field: "annotations." + core.AnnotationPluginVolumeMounts, Reason: "plugin volumes are not supported by this master"}
	}
	injectEnvd(req, out)
	hostDirVolumes := map[string]bool{}
	for i := range req.Volumes {
		pv, err := o.volumeToProto(fmt.Sprintf("volumes[%d]", i), &req.Volumes[i])
		if err != nil {
			return nil, err
		}
		if pv.VolumeSource.HostDirVolumes != nil {
			hostDirVolumes[pv.Name] = true
		}
		out.Volumes = append(out.Volumes, pv)
	}
	// Upstream then adds every request annotation not set yet, so the node
	// sees the caller's other annotations too.
	for k, v := range req.Annotations {
		if _, ok := out.Annotations[k]; !ok {
			out.Annotations[k] = v
		}
	}
	for i := range req.Containers {
		pc, err := containerToProto(fmt.Sprintf("containers[%d]", i), &req.Containers[i], hostDirVolumes)
		if err != nil {
			return nil, err
		}
		out.Containers = append(out.Containers, pc)
	}
	if err := o.exposedPorts(req, out); err != nil {
		return nil, err
	}
	return out, nil
}

// annotations sets the top-level annotations before the volumes are mapped.
func (o RequestOptions) annotations(req *core.SandboxRequest, out *cubeletpb.RunCubeSandboxRequest) error {
	if req.Annotations == nil {
		return &core.FieldError{Field: "annotations", Reason: "are required"}
	}
	if v, ok := req.Annotations[core.AnnotationNetID]; ok && v == "" {
		return &core.FieldError{Field: "annotations." + core.AnnotationNetID, Reason: "is empty"}
	}
	if v, ok := req.Annotations[core.AnnotationComVIPs]; ok {
		out.Annotations[core.AnnotationVIPs] = v
	}
	out.Annotations[core.AnnotationBlkQos] = byInstanceType(o.BlkQos, o.BlkQosByInstanceType, req.InstanceType)
	out.Annotations[core.AnnotationFSQos] = byInstanceType(o.FsQos, o.FsQosByInstanceType, req.InstanceType)
	for k, v := range req.Annotations {
		if strings.HasPrefix(k, core.MasterAnnotationPrefix) || strings.HasPrefix(k, core.CloudAnnotationPrefix) {
			out.Annotations[k] = v
		}
	}
	out.Annotations[core.AnnotationUseNetfileCache] = "true"
	if req.Annotations[core.AnnotationRegion] == "" {
		out.Annotations[core.AnnotationRegion] = o.Region
	}
	if len(req.CreateTimeEnvVars) > 0 {
		b, err := json.Marshal(req.CreateTimeEnvVars)
		if err != nil {
			return &core.FieldError{Field: "create_time_env_vars", Reason: err.Error()}
		}
		if len(b) > maxCreateTimeEnvBytes {
			return &core.FieldError{Field: "create_time_env_vars", Reason: fmt.Sprintf("%d bytes of JSON, over the %d byte limit", len(b), maxCreateTimeEnvBytes)}
		}
		out.Annotations[core.AnnotationCreateTimeEnvVars] = string(b)
	}
	return nil
}

// byInstanceType is the per-instance-type value when the map is set and
// names it, else def (upstream getBlkQosAnnotation).
func byInstanceType(def string, m map[string]string, instanceType string) string {
	if v, ok := m[instanceType]; ok {
		return v
	}
	return def
}

// exposedPorts appends the exposed ports (upstream getExposedPorts).
func (o RequestOptions) exposedPorts(req *core.SandboxRequest, out *cubeletpb.RunCubeSandboxRequest) error {
	if !o.EnableExposedPort {
		return nil
	}
	ports := o.ExposedPortList
	if p, ok := req.Annotations[core.AnnotationExposedPorts]; ok {
		ports = strings.Split(p, ":")
	}
	for _, s := range ports {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return &core.FieldError{Field: "annotations." + core.AnnotationExposedPorts, Reason: fmt.Sprintf("%q is not a port", s)}
		}
		if !slices.Contains(out.ExposedPorts, v) {
			out.ExposedPorts = append(out.ExposedPorts, v)
		}
	}
	if len(out.ExposedPorts) == 0 {
		return &core.FieldError{Field: "annotations." + core.AnnotationExposedPorts, Reason: "no port to expose (set the annotation or the exposed port list)"}
	}
	return nil
}

// hostMountJSON is one entry of the host-mount annotation.
type hostMountJSON struct {
	HostPath  string `json:"hostPath"`
	MountPath string `json:"mountPath"`
	ReadOnly  bool   `json:"readOnly,omitempty"`
}

// injectHostMounts turns the host-mount annotation into host-dir volumes
// hostdir-<i> mounted in every container (upstream injectHostDirMounts). A
// volume or mount of that name already in the request must say the same.
func (o RequestOptions) injectHostMounts(req *core.SandboxRequest) error {
	const key = core.AnnotationHostMount
	raw := req.Annotations[key]
	if strings.TrimSpace(raw) == "" {
		return nil
	}
	var mounts []hostMountJSON
	if err := json.Unmarshal([]byte(raw), &mounts); err != nil {
		return &core.FieldError{Field: "annotations." + key, Reason: "not a JSON list of {hostPath, mountPath, readOnly}: " + err.Error()}
	}
	for i := range mounts {
		f := fmt.Sprintf("annotations.%s[%d]", key, i)
		if !strings.HasPrefix(mounts[i].MountPath, "/") {
			return &core.FieldError{Field: f + ".mountPath", Reason: "must be an absolute path"}
		}
		cleaned, err := o.hostPath(f+".hostPath", mounts[i].HostPath)
		if err != nil {
			return err
		}
		mounts[i].HostPath = cleaned
	}
	for i, m := range mounts {
		name := fmt.Sprintf("hostdir-%d", i)
		if err := ensureHostDirVolume(req, name, m.HostPath); err != nil {
			return err
		}
		for c := range req.Containers {
			if err := ensureHostDirMount(&req.Containers[c], name, m); err != nil {
				return err
			}
		}
	}
	return nil
}

func ensureHostDirVolume(req *core.SandboxRequest, name, hostPath string) error {
	var existing *core.Volume
	for i := range req.Volumes {
		if req.Volumes[i].Name != name {
			continue
		}
		if existing != nil {
			return &core.FieldError{Field: "volumes", Reason: fmt.Sprintf("host-mount volume %q is duplicated", name)}
		}
		existing = &req.Volumes[i]
	}
	if existing == nil {
		hd, _ := json.Marshal(hostDirVolumesJSON{VolumeSources: []*hostDirSourceJSON{{Name: name, HostPath: hostPath}}})
		req.Volumes = append(req.Volumes, core.Volume{Name: name, VolumeSource: &core.VolumeSource{HostDirVolumes: hd}})
		return nil
	}
	var h hostDirVolumesJSON
	if existing.VolumeSource != nil {
		_, _ = decodeRaw("", existing.VolumeSource.HostDirVolumes, &h)
	}
	if len(h.VolumeSources) != 1 || h.VolumeSources[0] == nil || h.VolumeSources[0].Name != name || path.Clean(h.VolumeSources[0].HostPath) != hostPath {
		return &core.FieldError{Field: "volumes", Reason: fmt.Sprintf("host-mount volume %q conflicts with an existing volume", name)}
	}
	return nil
}

func ensureHostDirMount(c *core.Container, name string, m hostMountJSON) error {
	var existing *volumeMountJSON
	for _, raw := range c.VolumeMounts {
		var vm volumeMountJSON
		if ok, err := decodeRaw("", raw, &vm); err != nil || !ok || vm.Name != name {
			continue
		}
		if existing != nil {
			return &core.FieldError{Field: "volume_mounts", Reason: fmt.Sprintf("host-mount volume mount %q is duplicated", name)}
		}
		existing = &vm
	}
	if existing == nil {
		vm, _ := json.Marshal(volumeMountJSON{Name: name, ContainerPath: m.MountPath, HostPath: m.HostPath, Readonly: m.ReadOnly})
		c.VolumeMounts = append(c.VolumeMounts, vm)
		return nil
	}
	if path.Clean(existing.HostPath) != m.HostPath || path.Clean(existing.ContainerPath) != path.Clean(m.MountPath) || existing.Readonly != m.ReadOnly {
		return &core.FieldError{Field: "volume_mounts", Reason: fmt.Sprintf("host-mount volume mount %q conflicts with an existing mount", name)}
	}
	return nil
}

// injectEnvd wraps the first container's entrypoint so envd starts first
// and exposes its port (upstream injectEnvdSidecar). Only cubebox
// instances get it; an entrypoint already wrapped is left alone.
func injectEnvd(req *core.SandboxRequest, out *cubeletpb.RunCubeSandboxRequest) {
	if req.Annotations[core.AnnotationInjectEnvd] != core.InjectEnvdOptIn {
		return
	}
	if req.InstanceType != "" && req.InstanceType != core.DefaultInstanceType {
		return
	}
	c := &req.Containers[0]
	if len(c.Command) >= 2 && c.Command[0] == "/bin/sh" && c.Command[1] == "-c" &&
		len(c.Args) >= 1 && strings.Contains(c.Args[0], core.EnvdInImagePath) {
		return
	}
	orig := append(slices.Clone(c.Command), c.Args...)
	if len(orig) == 0 {
		orig = []string{"sleep", "infinity"}
	}
	c.Command = []string{"/bin/sh", "-c"}
	c.Args = append([]string{core.EnvdInImagePath + ` >/var/log/envd.log 2>&1 & exec "$@"`, "--"}, orig...)
	out.ExposedPorts = append(out.ExposedPorts, core.EnvdPort)
}

// cloneSandboxRequest deep-copies what RunRequest rewrites (annotations,
// volumes, containers and their mounts and commands).
func cloneSandboxRequest(in *core.SandboxRequest) *core.SandboxRequest {
	c := *in
	c.Annotations = maps.Clone(in.Annotations)
	c.Volumes = slices.Clone(in.Volumes)
	c.Containers = slices.Clone(in.Containers)
	for i := range c.Containers {
		c.Containers[i].Command = slices.Clone(c.Containers[i].Command)
		c.Containers[i].Args = slices.Clone(c.Containers[i].Args)
		c.Containers[i].VolumeMounts = slices.Clone(c.Containers[i].VolumeMounts)
	}
	return &c
}

func networkConfigToProto(n *core.CubeVSContext) *cubeletpb.CubeNetworkConfig {
	if n == nil {
		return nil
	}
	out := &cubeletpb.CubeNetworkConfig{
		AllowOut: slices.Clone(n.AllowOut),
		DenyOut:  slices.Clone(n.DenyOut),
	}
	if n.AllowInternetAccess != nil {
		b := *n.AllowInternetAccess
		out.AllowInternetAccess = &b
	}
	for _, r := range n.Rules {
		if r == nil {
			continue
		}
		pr := &cubeletpb.EgressRule{Name: r.Name}
		if m := r.Match; m != nil {
			pr.Match = &cubeletpb.EgressRuleMatch{Sni: m.SNI, Host: m.Host, Method: slices.Clone(m.Method), Path: m.Path, Scheme: m.Scheme}
			if m.Port != nil {
				p := int32(*m.Port)
				pr.Match.Port = &p
			}
		}
		if a := r.Action; a != nil {
			pr.Action = &cubeletpb.EgressRuleAction{Allow: a.Allow, Audit: a.Audit}
			for _, inj := range a.Inject {
				if inj != nil {
					pr.Action.Inject = append(pr.Action.Inject, &cubeletpb.EgressRuleInject{Header: inj.Header, Secret: inj.Secret, Format: inj.Format})
				}
			}
		}
		out.Rules = append(out.Rules, pr)
	}
	return out
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

// SnapshotBackend is the AppSnapshot request's backend: the request's
// backend, else its cube.master.storage.backend annotation, both trimmed
// and not normalized (upstream storageBackendFromCreate).
func SnapshotBackend(in *core.SandboxRequest) string {
	if b := strings.TrimSpace(in.Backend); b != "" {
		return b
	}
	return strings.TrimSpace(in.Annotations[core.AnnotationStorageBackend])
}

func (o RequestOptions) volumeToProto(field string, v *core.Volume) (*cubeletpb.Volume, error) {
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
			cleaned, err := o.hostPath(f+".host_path", s.HostPath)
			if err != nil {
				return nil, err
			}
			hd.VolumeSources = append(hd.VolumeSources, &cubeletpb.HostDirSource{Name: s.Name, HostPath: cleaned})
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

func containerToProto(field string, c *core.Container, hostDirVolumes map[string]bool) (*cubeletpb.ContainerConfig, error) {
	if c.Resources == nil {
		return nil, &core.FieldError{Field: field + ".resources", Reason: "is required (cpu and mem)"}
	}
	if c.Image == nil {
		return nil, &core.FieldError{Field: field + ".image", Reason: "is required"}
	}
	if c.Image.StorageMedia == "nfs" {
		return nil, &core.FieldError{Field: field + ".image.storage_media", Reason: "nfs rootfs images are not supported"}
	}
	out := &cubeletpb.ContainerConfig{
		Name:        c.Name,
		Id:          c.ID,
		Image:       sandboxImageToProto(c.Image),
		Command:     c.Command,
		Args:        c.Args,
		WorkingDir:  c.WorkingDir,
		Sysctls:     c.Sysctls,
		Annotations: containerAnnotations(c.Annotations),
		Resources:   &cubeletpb.Resource{Cpu: c.Resources.CPU, Mem: c.Resources.Mem},
	}
	if l := c.Resources.Limit; l != nil {
		out.Resources.CpuLimit, out.Resources.MemLimit = l.CPU, l.Mem
	}
	for j, e := range c.Envs {
		if e == nil {
			return nil, &core.FieldError{Field: fmt.Sprintf("%s.envs[%d]", field, j), Reason: "is null"}
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
		if hostDirVolumes[m.Name] {
			// A host directory is shared private and never executable.
			prop, m.Exec = int32(cubeletpb.MountPropagation_PROPAGATION_PRIVATE), false
			m.RecursiveReadOnly = m.RecursiveReadOnly || m.Readonly
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

// sandboxImageToProto maps a container image as upstream does: image,
// storage medium and annotations (always a map), the registry name and
// token as annotations. Namespace and runtime handler stay behind.
func sandboxImageToProto(im *core.SandboxImage) *cubeletpb.ImageSpec {
	ann := maps.Clone(im.Annotations)
	if ann == nil {
		ann = map[string]string{}
	}
	if im.Name != "" {
		ann[core.AnnotationImageUsername] = im.Name
	}
	if im.Token != "" {
		ann[core.AnnotationImageToken] = im.Token
	}
	return &cubeletpb.ImageSpec{Image: im.Image, Annotations: ann, StorageMedia: im.StorageMedia}
}

// containerAnnotations filters a container's annotations as upstream does:
// cube.* and the com.netid / com.invoke_port / com.exposed_ports /
// com.vips families are dropped, except cube.master*.
func containerAnnotations(in map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range in {
		dropped := strings.HasPrefix(k, "cube.") || strings.HasPrefix(k, core.AnnotationNetID) ||
			strings.HasPrefix(k, core.AnnotationInvokePort) || strings.HasPrefix(k, core.AnnotationExposedPorts) ||
			strings.HasPrefix(k, core.AnnotationComVIPs)
		if !dropped || strings.HasPrefix(k, core.MasterAnnotationPrefix) {
			out[k] = v
		}
	}
	return out
}
