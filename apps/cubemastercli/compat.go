package main

// Upstream cubemastercli's command line, where it differs from ours:
// create-from-image's container-override and network flags, build-watch,
// render, and the `cubebox template` spelling (urfave/cli in upstream's
// CubeMaster/cmd/cubemastercli/commands/cubebox/template.go).

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/cubeview"
	"github.com/cubesandbox/templatecenter/apps/internal/cmdutil"
	"github.com/cubesandbox/templatecenter/core"
)

// EnvRegistryPassword carries the registry password without putting it on
// the command line.
const EnvRegistryPassword = "CUBE_REGISTRY_PASSWORD"

// Upstream's --probe defaults (parseContainerOverrides).
const (
	probeTimeoutMs        = 30000
	probePeriodMs         = 500
	probeFailureThreshold = 60
	probeSuccessThreshold = 1
)

// fromImageFlags are create-from-image's flags beyond the request fields.
type fromImageFlags struct {
	password      string
	passwordStdin bool
	name          string
	allowInternet bool
	allowOut      []string
	denyOut       []string
	cmd, args     []string
	envs          []string
	dns           []string
	probe         int
	probePath     string
	cpu, memory   int
	withCubeCA    bool
	ivshmem       bool
	injectEnvd    bool
	envdPath      string
}

func (f *fromImageFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.password, "registry-password", "", "registry password; visible to other users in the process list, prefer $"+EnvRegistryPassword+", --registry-password-stdin or the prompt")
	fl.BoolVar(&f.passwordStdin, "registry-password-stdin", false, "read the registry password from the first line of standard input")
	fl.StringVar(&f.name, "name", "", "same as --alias")
	fl.BoolVar(&f.allowInternet, "allow-internet-access", false, "set allowInternetAccess in the template's network policy")
	fl.StringArrayVar(&f.allowOut, "allow-out-cidr", nil, "allowed egress CIDR (repeatable)")
	fl.StringArrayVar(&f.denyOut, "deny-out-cidr", nil, "denied egress CIDR (repeatable)")
	fl.StringArrayVar(&f.cmd, "cmd", nil, "override the image ENTRYPOINT, one element per flag")
	fl.StringArrayVar(&f.args, "arg", nil, "override the image CMD, one element per flag")
	fl.StringArrayVar(&f.envs, "env", nil, "environment variable KEY=VALUE (repeatable; replaces the image's)")
	fl.StringArrayVar(&f.dns, "dns", nil, "DNS server IP (repeatable)")
	fl.IntVar(&f.probe, "probe", 0, "HTTP GET readiness probe on this port (timeout 30s, period 500ms)")
	fl.StringVar(&f.probePath, "probe-path", "/health", "path of the --probe request")
	fl.IntVar(&f.cpu, "cpu", 2000, "CPU of the template container in millicores")
	fl.IntVar(&f.memory, "memory", 2000, "memory of the template container in MiB")
	fl.BoolVar(&f.withCubeCA, "with-cube-ca", true, "bake the CubeEgress root CA (the master's "+core.CubeCAPath+") into the rootfs; --with-cube-ca=false skips it")
	fl.BoolVar(&f.ivshmem, "enable-ivshmem", false, "boot the template's build sandbox with ivshmem")
	fl.BoolVar(&f.injectEnvd, "enable-inject-envd", false, "inject the envd agent into the rootfs (the one --envd-path names, else the master's)")
	fl.StringVar(&f.envdPath, "envd-path", "", "envd binary to upload and inject (needs --enable-inject-envd)")
}

// envdUpload reads the --envd-path binary, checked as the master checks it;
// nil without the flag.
func (f *fromImageFlags) envdUpload() ([]byte, error) {
	if f.envdPath == "" {
		return nil, nil
	}
	if !f.injectEnvd {
		return nil, fmt.Errorf("--envd-path requires --enable-inject-envd")
	}
	st, err := os.Stat(f.envdPath)
	if err != nil {
		return nil, fmt.Errorf("--envd-path: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("--envd-path %s: not a regular file", f.envdPath)
	}
	if st.Size() > core.MaxEnvdBytes {
		return nil, fmt.Errorf("--envd-path %s: %d bytes, at most %d (16 MiB)", f.envdPath, st.Size(), core.MaxEnvdBytes)
	}
	data, err := os.ReadFile(f.envdPath)
	if err != nil {
		return nil, fmt.Errorf("--envd-path: %w", err)
	}
	if err := core.ValidateEnvdUpload(data); err != nil {
		return nil, fmt.Errorf("--envd-path %s: %w", f.envdPath, err)
	}
	return data, nil
}

// uploadForm is the create request with an envd upload, in upstream's
// multipart form: the JSON request as the "request" field, the binary as
// the "envd" file.
func uploadForm(req *cubeview.FromImageRequest, envd []byte) (formBody, error) {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	js, err := json.Marshal(req)
	if err != nil {
		return formBody{}, err
	}
	if err := mw.WriteField("request", string(js)); err != nil {
		return formBody{}, err
	}
	fw, err := mw.CreateFormFile("envd", "envd")
	if err != nil {
		return formBody{}, err
	}
	if _, err := fw.Write(envd); err != nil {
		return formBody{}, err
	}
	if err := mw.Close(); err != nil {
		return formBody{}, err
	}
	return formBody{data: b.Bytes(), contentType: mw.FormDataContentType()}, nil
}

// apply fills req from the flags. args are the command's positional
// arguments: upstream accepts a trailing "true"/"false" after
// --allow-internet-access.
func (f *fromImageFlags) apply(cmd *cobra.Command, args []string, req *cubeview.FromImageRequest, stdin io.Reader) error {
	fl := cmd.Flags()
	if len(args) > 0 {
		b, err := strconv.ParseBool(args[0])
		if len(args) != 1 || err != nil || !fl.Changed("allow-internet-access") {
			return fmt.Errorf("unexpected arguments %q", args)
		}
		f.allowInternet = b
	}
	if f.name != "" {
		if req.Alias != "" && req.Alias != f.name {
			return fmt.Errorf("--name %q and --alias %q disagree", f.name, req.Alias)
		}
		req.Alias = f.name
	}
	if fl.Changed("allow-internet-access") || len(f.allowOut) > 0 || len(f.denyOut) > 0 {
		policy := &core.CubeVSContext{AllowOut: f.allowOut, DenyOut: f.denyOut}
		if fl.Changed("allow-internet-access") {
			allow := f.allowInternet
			policy.AllowInternetAccess = &allow
		}
		// The newest key, as upstream's newest CLI sends it.
		req.CubeNetworkConfig = policy
	}
	withCA := f.withCubeCA
	req.WithCubeCA = &withCA
	if fl.Changed("enable-ivshmem") {
		on := f.ivshmem
		req.EnableIvshmem = &on
	}
	o, err := f.overrides(fl.Changed("cpu") || fl.Changed("memory"))
	if err != nil {
		return err
	}
	if f.injectEnvd {
		if o == nil {
			o = &core.ContainerOverrides{}
		}
		o.Annotations = map[string]string{core.AnnotationInjectEnvd: core.InjectEnvdOptIn}
	}
	req.ContainerOverrides = o
	pw, err := f.registryPassword(cmd, req.RegistryUsername, stdin)
	if err != nil {
		return err
	}
	req.RegistryPassword = pw
	return nil
}

// overrides builds container_overrides as upstream's
// parseContainerOverrides does; nil when no override flag is set.
func (f *fromImageFlags) overrides(resources bool) (*core.ContainerOverrides, error) {
	if len(f.cmd) == 0 && len(f.args) == 0 && len(f.envs) == 0 && len(f.dns) == 0 && f.probe == 0 && !resources {
		return nil, nil
	}
	o := &core.ContainerOverrides{Command: f.cmd, Args: f.args}
	for _, kv := range f.envs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("--env %q: want KEY=VALUE", kv)
		}
		o.Envs = append(o.Envs, &core.KeyValue{Key: k, Value: v})
	}
	for _, s := range f.dns {
		if net.ParseIP(s) == nil {
			return nil, fmt.Errorf("--dns %q: not an IP address", s)
		}
	}
	if len(f.dns) > 0 {
		o.DNSConfig = &core.DNSConfig{Servers: f.dns}
	}
	if resources {
		o.Resources = &core.Resource{CPU: fmt.Sprintf("%dm", f.cpu), Mem: fmt.Sprintf("%dMi", f.memory)}
	}
	if f.probe > 0 {
		path := f.probePath
		if path == "" {
			path = "/health"
		}
		p, err := json.Marshal(map[string]any{
			"probe_handler": map[string]any{"http_get": map[string]any{"path": path, "port": f.probe, "host": ""}},
			"timeout_ms":    probeTimeoutMs, "period_ms": probePeriodMs,
			"failure_threshold": probeFailureThreshold, "success_threshold": probeSuccessThreshold,
		})
		if err != nil {
			return nil, err
		}
		o.Probe = p
	}
	return o, nil
}

// registryPassword picks the password: --registry-password (with a warning,
// the value is never printed), else $CUBE_REGISTRY_PASSWORD, else
// --registry-password-stdin, else a prompt when a user is given and the
// input is a terminal.
func (f *fromImageFlags) registryPassword(cmd *cobra.Command, user string, stdin io.Reader) (string, error) {
	if cmd.Flags().Changed("registry-password") {
		fmt.Fprintln(cmd.ErrOrStderr(), "cubemastercli: warning: --registry-password is visible to other users in the process list; prefer $"+EnvRegistryPassword+" or --registry-password-stdin")
		return f.password, nil
	}
	if v, ok := os.LookupEnv(EnvRegistryPassword); ok {
		return v, nil
	}
	if f.passwordStdin {
		line, err := bufio.NewReader(stdin).ReadString('\n')
		if err != nil && err != io.EOF {
			return "", fmt.Errorf("--registry-password-stdin: %w", err)
		}
		return strings.TrimRight(line, "\r\n"), nil
	}
	if user == "" {
		return "", nil
	}
	tty, ok := stdin.(*os.File)
	if !ok || !canPrompt(tty) {
		return "", nil
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "Registry password for %s: ", user)
	pw, err := readHidden(tty)
	fmt.Fprintln(cmd.ErrOrStderr())
	if err != nil {
		return "", fmt.Errorf("read the registry password: %w (set $%s instead)", err, EnvRegistryPassword)
	}
	return pw, nil
}

// buildWatchCmd is `tpl build-watch`: build-status until the build is ready
// or failed (exit 1 on error).
func (a *app) buildWatchCmd() *cobra.Command {
	var id string
	var interval time.Duration
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "build-watch BUILD_ID|TEMPLATE",
		Short: "Follow a build's status until it is ready or failed; a template id or alias follows its last job",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := idArg(args, id, "build-id", "BUILD_ID")
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			last := ""
			for {
				var st cubeview.BuildStatus
				raw, job, err := a.buildStatus(cmd.Context(), c, id, &st)
				if err != nil {
					return err
				}
				// A template names its last job once; follow that job.
				id = job
				done := st.Status == "ready" || st.Status == "error"
				if line := fmt.Sprintf("build %s: %s %d%% %s", st.BuildID, strings.ToUpper(st.Status), st.Progress, st.Message); !asJSON && line != last {
					fmt.Fprintln(a.out, strings.TrimSpace(line))
					last = line
				}
				if done {
					if asJSON {
						if err := a.printJSON(raw); err != nil {
							return err
						}
					}
					if st.Status == "error" {
						return fmt.Errorf("build %s failed: %s", id, st.Message)
					}
					return nil
				}
				if err := sleep(cmd.Context(), interval); err != nil {
					return err
				}
			}
		},
	}
	cmd.Flags().StringVar(&id, "build-id", "", "build id (or the first argument)")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "polling interval")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the last raw response")
	return cmd
}

// renderCmd is `tpl render`: the sandbox request a create naming the
// template would use, through POST /cube/sandbox/preview.
func (a *app) renderCmd() *cobra.Command {
	var file, id string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "render [file]",
		Short: "Show the effective sandbox request for a template (and what a node would be sent)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" && len(args) == 1 {
				file = args[0]
			}
			req := map[string]any{}
			if file != "" {
				b, err := os.ReadFile(file)
				if err != nil {
					return err
				}
				if err := json.Unmarshal(b, &req); err != nil {
					return fmt.Errorf("%s: not a JSON sandbox request: %w", file, err)
				}
			}
			ann, _ := req["annotations"].(map[string]any)
			if ann == nil {
				ann = map[string]any{}
			}
			if id != "" {
				ann[core.AnnotationTemplateID] = id
			}
			if s, _ := ann[core.AnnotationTemplateID].(string); s == "" {
				return fmt.Errorf("--template-id is required, in the request file or as a flag")
			}
			if ann[core.AnnotationAppSnapshotVersion] == nil && ann[core.AnnotationTemplateVersion] == nil {
				ann[core.AnnotationAppSnapshotVersion] = core.DefaultTemplateVersion
				ann[core.AnnotationTemplateVersion] = core.DefaultTemplateVersion
			}
			req["annotations"] = ann
			req["requestID"] = newRequestID()
			c, err := a.client()
			if err != nil {
				return err
			}
			var resp previewView
			raw, err := c.do(cmd.Context(), http.MethodPost, pathPreview, nil, req, &resp)
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(raw)
			}
			resp.print(a.out)
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "sandbox create request JSON (or the first argument)")
	cmd.Flags().StringVar(&id, "template-id", "", "template id or alias; overrides the file's annotation")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the raw response")
	return cmd
}

const pathPreview = "/cube/sandbox/preview"

// previewView is the part of the preview answer render prints.
type previewView struct {
	RequestID      string       `json:"requestID"`
	APIRequest     *sandboxView `json:"api_request"`
	MergedRequest  *sandboxView `json:"merged_request"`
	CubeletRequest *cubeletView `json:"cubelet_request"`
}

type sandboxView struct {
	Annotations    map[string]string   `json:"annotations"`
	Containers     []json.RawMessage   `json:"containers"`
	Volumes        []json.RawMessage   `json:"volumes"`
	NetworkType    string              `json:"network_type"`
	RuntimeHandler string              `json:"runtime_handler"`
	Namespace      string              `json:"namespace"`
	Network        *core.CubeVSContext `json:"cube_network_config"`
	OldNetwork     *core.CubeVSContext `json:"cubevs_context"`
}

type cubeletView struct {
	Containers   []json.RawMessage `json:"containers"`
	Volumes      []json.RawMessage `json:"volumes"`
	ExposedPorts []int64           `json:"exposed_ports"`
	Network      *struct {
		AllowInternetAccess *bool    `json:"allow_internet_access"`
		AllowOut            []string `json:"allow_out"`
		DenyOut             []string `json:"deny_out"`
	} `json:"cube_network_config"`
}

func (p previewView) print(w io.Writer) {
	kv(w, "request_id", p.RequestID)
	if r := p.APIRequest; r != nil {
		kv(w, "api_request", fmt.Sprintf("template=%s containers=%d volumes=%d network=%s",
			r.Annotations[core.AnnotationTemplateID], len(r.Containers), len(r.Volumes), r.NetworkType))
	}
	if r := p.MergedRequest; r != nil {
		kv(w, "merged_request", fmt.Sprintf("containers=%d volumes=%d network=%s runtime=%s namespace=%s",
			len(r.Containers), len(r.Volumes), r.NetworkType, r.RuntimeHandler, r.Namespace))
		policy := r.Network
		if policy == nil {
			policy = r.OldNetwork
		}
		kv(w, "merged_request_cube_network_config", formatPolicy(policy))
	}
	if r := p.CubeletRequest; r != nil {
		kv(w, "cubelet_request", fmt.Sprintf("containers=%d volumes=%d exposed_ports=%v", len(r.Containers), len(r.Volumes), r.ExposedPorts))
		if n := r.Network; n != nil {
			kv(w, "cubelet_request_cube_network_config", formatPolicy(&core.CubeVSContext{AllowInternetAccess: n.AllowInternetAccess, AllowOut: n.AllowOut, DenyOut: n.DenyOut}))
		}
	}
}

// formatPolicy prints a network policy as upstream's CLI does.
func formatPolicy(p *core.CubeVSContext) string {
	if p == nil {
		return "allow_internet_access=default(true) allow_out=[] deny_out=[]"
	}
	allow := "default(true)"
	if p.AllowInternetAccess != nil {
		allow = strconv.FormatBool(*p.AllowInternetAccess)
	}
	return fmt.Sprintf("allow_internet_access=%s allow_out=%v deny_out=%v rules=%d", allow, p.AllowOut, p.DenyOut, len(p.Rules))
}

// cubeboxCmd is upstream's `cubemastercli cubebox template ...` spelling of
// the template commands.
func cubeboxCmd(tpl *cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: "cubebox", Short: "Sandbox commands (here: only templates, as `cubebox template`)"}
	cmdutil.Group(c)
	c.AddCommand(tpl)
	return c
}
