package control

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/cubesandbox/templatecenter/core"
)

// Fixed values of the generated sandbox request.
const (
	RootfsWritableVolume  = "cube_rootfs_rw"
	TemplateContainerName = "cubebox-name-0"
	DefaultTemplateCPU    = "2000m"
	DefaultTemplateMemory = "2000Mi"
)

// DefaultNoFile is the template container's default open-file limit.
const DefaultNoFile uint64 = 1000000

// WantsEnvd reports whether the request opted in to agent injection.
func WantsEnvd(req *core.FromImageRequest) bool {
	return req != nil && req.ContainerOverrides != nil &&
		req.ContainerOverrides.Annotations[core.AnnotationInjectEnvd] == core.InjectEnvdOptIn
}

// rootMount is the writable-layer mount every template container gets.
var rootMount = json.RawMessage(`{"name":"` + RootfsWritableVolume + `","container_path":"/"}`)

// ValidateOverrides checks the container overrides the generated request
// will carry, so that a bad override fails the create call instead of the
// resume pipeline later: volume mounts must be objects and must not mount
// "/" (the writable rootfs belongs to the template); security_context and
// probe must be JSON objects; resources must be quantities above zero.
func ValidateOverrides(req *core.FromImageRequest) error {
	_, err := overrideMounts(req)
	if err != nil {
		return err
	}
	if req == nil || req.ContainerOverrides == nil {
		return nil
	}
	o := req.ContainerOverrides
	for i, kv := range o.Envs {
		switch {
		case kv == nil || kv.Key == "":
			return &core.FieldError{Field: fmt.Sprintf("container_overrides.envs[%d].key", i), Reason: "is required"}
		case strings.ContainsAny(kv.Key, "=\x00"):
			return &core.FieldError{Field: fmt.Sprintf("container_overrides.envs[%d].key", i), Reason: "must not hold '=' or NUL"}
		case strings.ContainsRune(kv.Value, 0):
			return &core.FieldError{Field: fmt.Sprintf("container_overrides.envs[%d].value", i), Reason: "must not hold NUL"}
		}
	}
	for field, list := range map[string][]string{"command": o.Command, "args": o.Args, "working_dir": {o.WorkingDir}} {
		for _, v := range list {
			if strings.ContainsRune(v, 0) {
				return &core.FieldError{Field: "container_overrides." + field, Reason: "must not hold NUL (a process argument cannot)"}
			}
		}
	}
	if err := validateResources("container_overrides.resources", o.Resources); err != nil {
		return err
	}
	for field, raw := range map[string]json.RawMessage{"security_context": o.SecurityContext, "probe": o.Probe} {
		if len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			continue
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return &core.FieldError{Field: "container_overrides." + field, Reason: "must be a JSON object"}
		}
	}
	return nil
}

// quantityPattern is a Kubernetes-style quantity without a sign: 2, 0.5,
// 2000m, 512Mi, 2Gi.
var quantityPattern = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$`)

// validateResources checks cpu and mem (and their limit) of an override:
// each, when given, a quantity above zero. A node handed -5 or "lots"
// would fail the template late, at snapshot time.
func validateResources(field string, r *core.Resource) error {
	if r == nil {
		return nil
	}
	for _, q := range []struct{ name, v string }{{"cpu", r.CPU}, {"mem", r.Mem}} {
		name, v := q.name, q.v
		if v == "" {
			continue
		}
		n := strings.TrimRight(v, "mkMGTPEi")
		if f, err := strconv.ParseFloat(n, 64); !quantityPattern.MatchString(v) || err != nil || f <= 0 {
			return &core.FieldError{Field: field + "." + name,
				Reason: fmt.Sprintf("%q is not a quantity above zero (for example 2000m or 2 for cpu, 2000Mi or 2Gi for mem)", v)}
		}
	}
	return validateResources(field+".limit", r.Limit)
}

func overrideMounts(req *core.FromImageRequest) ([]json.RawMessage, error) {
	if req == nil || req.ContainerOverrides == nil || len(req.ContainerOverrides.VolumeMounts) == 0 {
		return nil, nil
	}
	raw := bytes.TrimSpace(req.ContainerOverrides.VolumeMounts)
	if bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var mounts []json.RawMessage
	if err := json.Unmarshal(raw, &mounts); err != nil {
		return nil, &core.FieldError{Field: "container_overrides.volume_mounts", Reason: "must be a JSON array of mounts"}
	}
	for i, m := range mounts {
		var probe struct {
			ContainerPath string `json:"container_path"`
		}
		if err := json.Unmarshal(m, &probe); err != nil {
			return nil, &core.FieldError{Field: fmt.Sprintf("container_overrides.volume_mounts[%d]", i), Reason: "must be a JSON object"}
		}
		if strings.TrimSpace(probe.ContainerPath) == "/" {
			return nil, &core.FieldError{Field: fmt.Sprintf("container_overrides.volume_mounts[%d].container_path", i),
				Reason: "must not be / (the writable rootfs is owned by the template)"}
		}
	}
	return mounts, nil
}

// GenerateSandboxRequest builds the sandbox create request of a rootfs
// template from this template's own request snapshot, the artifact and the
// image config recorded at build time. It is a pure function: the same
// inputs always give the same request (maps marshal with sorted keys).
//
// Rules (upstream §3.6): command, args, env and working dir come from the
// image config unless overridden (an env override replaces the image env
// entirely); the image user is not applied; resources default to
// {cpu:2000m, mem:2000Mi}; security_context defaults to {privileged:true}
// and an override always gets readonly_rootfs=false; r_limit defaults to
// {no_file:1000000}; the writable layer is an empty_dir volume mounted at
// "/"; system_disk_size is the writable layer size in whole GiB.
func GenerateSandboxRequest(req *core.FromImageRequest, art core.NodeArtifact, img core.ImageConfig) (*core.SandboxRequest, error) {
	if req == nil {
		return nil, &core.FieldError{Field: "request", Reason: "is empty"}
	}
	if req.TemplateID == "" {
		return nil, core.ErrTemplateIDRequired
	}
	if art.ArtifactID == "" {
		return nil, &core.FieldError{Field: "artifact_id", Reason: "is required"}
	}
	mounts, err := overrideMounts(req)
	if err != nil {
		return nil, err
	}
	wls := req.WritableLayerSize
	ann := map[string]string{
		core.AnnotationTemplateID:         req.TemplateID,
		core.AnnotationAppSnapshotCreate:  "true",
		core.AnnotationAppSnapshotVersion: core.DefaultTemplateVersion,
		core.AnnotationTemplateVersion:    core.DefaultTemplateVersion,
		core.AnnotationArtifactID:         art.ArtifactID,
		core.AnnotationWritableLayerSize:  wls,
		core.AnnotationSpecFingerprint:    art.Fingerprint,
	}
	if WantsEnvd(req) {
		ann[core.AnnotationInjectEnvd] = core.InjectEnvdOptIn
	}
	if req.EnableIvshmem != nil && *req.EnableIvshmem {
		ann[core.AnnotationEnableIvshmem] = "true"
	}
	if gi, ok := QuantityToGi(wls); ok && gi > 0 {
		ann[core.AnnotationSystemDiskSize] = strconv.FormatInt(gi, 10)
	}
	if len(req.ExposedPorts) > 0 {
		ps := make([]string, len(req.ExposedPorts))
		for i, p := range req.ExposedPorts {
			ps[i] = strconv.Itoa(int(p))
		}
		ann[core.AnnotationExposedPorts] = strings.Join(ps, ":")
	}

	o := req.ContainerOverrides
	if o == nil {
		o = &core.ContainerOverrides{}
	}
	c := core.Container{
		Name: TemplateContainerName,
		Image: &core.SandboxImage{
			Image:             art.ArtifactID,
			StorageMedia:      core.StorageMediaExt4,
			WritableLayerSize: wls,
			Annotations: map[string]string{
				core.AnnotationArtifactID:        art.ArtifactID,
				core.AnnotationArtifactURL:       art.DownloadURL,
				core.AnnotationArtifactToken:     art.Token,
				core.AnnotationArtifactSHA256:    art.SHA256,
				core.AnnotationArtifactSizeBytes: strconv.FormatInt(art.SizeBytes, 10),
				core.AnnotationWritableLayerSize: wls,
				core.AnnotationSpecFingerprint:   art.Fingerprint,
			},
		},
		Command:      firstNonEmpty(o.Command, img.Entrypoint),
		Args:         firstNonEmpty(o.Args, img.Cmd),
		WorkingDir:   img.WorkingDir,
		Envs:         envPairs(img.Env),
		VolumeMounts: append([]json.RawMessage{rootMount}, mounts...),
		RLimit:       &core.RLimit{NoFile: DefaultNoFile},
		Resources:    &core.Resource{CPU: DefaultTemplateCPU, Mem: DefaultTemplateMemory},
		// upstream's default: the template boots privileged.
		SecurityContext: json.RawMessage(`{"privileged":true}`),
		Probe:           rawOrNil(o.Probe),
		DNSConfig:       o.DNSConfig,
		Annotations:     cloneMap(o.Annotations),
	}
	if o.WorkingDir != "" {
		c.WorkingDir = o.WorkingDir
	}
	if o.Envs != nil {
		c.Envs = o.Envs
	}
	if o.RLimit != nil {
		c.RLimit = o.RLimit
	}
	if o.Resources != nil {
		c.Resources = o.Resources
	}
	if sc := rawOrNil(o.SecurityContext); sc != nil {
		if c.SecurityContext, err = writableRootfs(sc); err != nil {
			return nil, err
		}
	}

	out := &core.SandboxRequest{
		Volumes: []core.Volume{{
			Name:         RootfsWritableVolume,
			VolumeSource: &core.VolumeSource{EmptyDir: &core.EmptyDirVolumeSource{SizeLimit: wls}},
		}},
		// Both keys of the policy: older upstream masters read
		// cubevs_context, the newest only cube_network_config.
		CubeVSContext:     cloneVS(req.CubeVSContext),
		CubeNetworkConfig: cloneVS(req.CubeVSContext),
		Containers:        []core.Container{c},
		Annotations:       ann,
		InstanceType:      req.InstanceType,
		NetworkType:       req.NetworkType,
		Backend:           req.Backend,
	}
	return out, nil
}

// StoredRequest is the definition's request_json: the generated request
// without the snapshot-create annotation and without a request id, the
// template id annotation forced (upstream normalizeStoredTemplateRequest).
//
// It holds no download token: the artifact's token annotation is left
// out and the artifact URL loses its token parameter, so the row does not
// hand anyone who reads the database a working download. WithDownloadToken
// puts the token back when the request goes to a node.
func StoredRequest(gen *core.SandboxRequest) *core.SandboxRequest {
	c := *gen
	c.RequestID = ""
	c.Annotations = cloneMap(gen.Annotations)
	delete(c.Annotations, core.AnnotationAppSnapshotCreate)
	c.Containers = slices.Clone(gen.Containers)
	for i, ct := range c.Containers {
		if ct.Image == nil || ct.Image.Annotations[core.AnnotationArtifactID] == "" {
			continue
		}
		img := *ct.Image
		img.Annotations = cloneMap(ct.Image.Annotations)
		delete(img.Annotations, core.AnnotationArtifactToken)
		if u, ok := img.Annotations[core.AnnotationArtifactURL]; ok {
			img.Annotations[core.AnnotationArtifactURL] = withURLToken(u, "")
		}
		c.Containers[i].Image = &img
	}
	return &c
}

// WithDownloadToken gives every container image of req built from the
// artifact artifactID its download token (the token annotation and the
// artifact URL's token parameter), in place: the inverse of what
// StoredRequest leaves out.
func WithDownloadToken(req *core.SandboxRequest, artifactID, token string) {
	for i, ct := range req.Containers {
		if ct.Image == nil || artifactID == "" || ct.Image.Annotations[core.AnnotationArtifactID] != artifactID {
			continue
		}
		img := *ct.Image
		img.Annotations = cloneMap(ct.Image.Annotations)
		img.Annotations[core.AnnotationArtifactToken] = token
		if u, ok := img.Annotations[core.AnnotationArtifactURL]; ok {
			img.Annotations[core.AnnotationArtifactURL] = withURLToken(u, token)
		}
		req.Containers[i].Image = &img
	}
}

// withURLToken sets (or, for "", removes) the token parameter of an
// artifact download URL; a URL that does not parse is left as it is.
func withURLToken(raw, token string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	q := u.Query()
	if token == "" {
		q.Del("token")
	} else {
		q.Set("token", token)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// writableRootfs forces readonly_rootfs=false on a security context
// override: the writable layer is the template's rootfs.
func writableRootfs(raw json.RawMessage) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, &core.FieldError{Field: "container_overrides.security_context", Reason: "must be a JSON object"}
	}
	m["readonly_rootfs"] = json.RawMessage("false")
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("marshal security_context: %w", err)
	}
	return b, nil
}

// QuantityToGi converts a writable layer size to whole GiB for the
// system_disk_size annotation: Gi/G taken as-is, Mi/M rounded up to GiB,
// Ti/T times 1024, Ki/K rounded up, a bare number is GiB; fractions round
// up. ok is false for anything else (the annotation is then left out).
func QuantityToGi(q string) (gi int64, ok bool) {
	v := strings.ToLower(strings.TrimSpace(q))
	mult := 1.0 // GiB per unit
	for _, u := range []struct {
		suffix string
		mult   float64
	}{{"gi", 1}, {"g", 1}, {"mi", 1.0 / 1024}, {"m", 1.0 / 1024}, {"ti", 1024}, {"t", 1024}, {"ki", 1.0 / (1024 * 1024)}, {"k", 1.0 / (1024 * 1024)}} {
		if strings.HasSuffix(v, u.suffix) {
			v, mult = strings.TrimSuffix(v, u.suffix), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	return int64(math.Ceil(f * mult)), true
}

func firstNonEmpty(a, b []string) []string {
	if len(a) > 0 {
		return slices.Clone(a)
	}
	return slices.Clone(b)
}

// envPairs turns image Env ("K=V") into key/value pairs sorted by key.
func envPairs(env []string) []*core.KeyValue {
	if len(env) == 0 {
		return nil
	}
	out := make([]*core.KeyValue, 0, len(env))
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		out = append(out, &core.KeyValue{Key: k, Value: v})
	}
	slices.SortStableFunc(out, func(a, b *core.KeyValue) int { return strings.Compare(a.Key, b.Key) })
	return out
}

func rawOrNil(r json.RawMessage) json.RawMessage {
	t := bytes.TrimSpace(r)
	if len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return nil
	}
	return slices.Clone(t)
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func cloneVS(v *core.CubeVSContext) *core.CubeVSContext {
	if v == nil {
		return nil
	}
	c := *v
	if v.AllowInternetAccess != nil {
		b := *v.AllowInternetAccess
		c.AllowInternetAccess = &b
	}
	c.AllowOut = slices.Clone(v.AllowOut)
	c.DenyOut = slices.Clone(v.DenyOut)
	// Rules are read-only once parsed; a shallow copy of the slice is
	// enough to keep the two policy keys independent.
	c.Rules = slices.Clone(v.Rules)
	return &c
}

// requestSpec is the replica's spec column: "cpu=<cpu>,mem=<mem>" of the
// template container's resources.
func requestSpec(r *core.SandboxRequest) string {
	var cpu, mem []string
	for _, c := range r.Containers {
		if c.Resources != nil {
			cpu = append(cpu, c.Resources.CPU)
			mem = append(mem, c.Resources.Mem)
		}
	}
	return "cpu=" + strings.Join(cpu, "+") + ",mem=" + strings.Join(mem, "+")
}
