package config

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// NodeAgentSetting is one nodeagent flag and the variable that sets its
// default. The node agent takes flags (cobra); the variables let a unit
// file or a container set them. A setting without a flag (a secret, which
// a flag would show in process listings) is read from its variable only.
type NodeAgentSetting struct {
	Flag    string
	Env     string
	Default string
	Doc     string
}

// NodeAgent flag defaults.
const (
	NodeAgentListen = "127.0.0.1:9999"
	// NodeAgentNodeID matches the master's examples
	// (CUBE_MASTER_NODES=node-1=127.0.0.1:9999).
	NodeAgentNodeID = "node-1"
	// NodeAgentTokenVariable holds the node credential; it has no flag.
	NodeAgentTokenVariable = "CUBE_NODEAGENT_TOKEN"
)

// NodeAgentSettings lists the node agent's flags.
func NodeAgentSettings() []NodeAgentSetting {
	return []NodeAgentSetting{
		{"listen", "CUBE_NODEAGENT_LISTEN", NodeAgentListen, "gRPC listen address host:port; every call must carry the node credential (CUBE_NODEAGENT_TOKEN), but keep it on an internal network"},
		{"", NodeAgentTokenVariable, "", "Node credential every call must carry (gRPC metadata `x-cube-node-token`): the master's CUBE_MASTER_NODE_TOKEN. " +
			"Required, at least 16 characters (`openssl rand -hex 32`): the agent refuses to start without it and refuses every call, gRPC health included, without it. " +
			"Read from the environment only (a flag would show it in process listings)."},
		{"master-urls", "CUBE_NODEAGENT_MASTER_URLS", "", "comma-separated base URLs of the masters artifacts are downloaded from (each master's CUBE_MASTER_DOWNLOAD_BASE_URL). " +
			"Required: a download URL not under one of them (scheme, host, port and path) is refused before any connection is made; a redirect a master answers with is followed"},
		{"file-mode", "CUBE_NODEAGENT_FILE_MODE", "0640", "mode (octal) of the artifacts, digests and run templates the agent writes; directories get a search bit for each read bit (0640: 0750). " +
			"Nothing is world-readable by default: run a Cubelet that reads the artifacts as another user in the agent's group, or set 0644"},
		{"tls-cert", "CUBE_NODEAGENT_TLS_CERT", "", "serve gRPC over TLS with this certificate (PEM; with --tls-key); the master then needs CUBE_MASTER_NODE_TLS_CA"},
		{"tls-key", "CUBE_NODEAGENT_TLS_KEY", "", "the private key (PEM) of --tls-cert"},
		{"tls-client-ca", "CUBE_NODEAGENT_TLS_CLIENT_CA", "", "require callers to present a certificate signed by this CA (PEM; mutual TLS): the master's CUBE_MASTER_NODE_TLS_CERT"},
		{"data-dir", "CUBE_NODEAGENT_DATA_DIR", "/var/lib/cube-nodeagent", "directory for artifacts and run templates"},
		{"node-id", "CUBE_NODEAGENT_NODE_ID", NodeAgentNodeID, "node id used in logs and messages; the id the master's CUBE_MASTER_NODES gives this node"},
		{"log-level", "CUBE_NODEAGENT_LOG_LEVEL", "info", "debug, info, warn or error"},
		{"log-format", "CUBE_NODEAGENT_LOG_FORMAT", "json", "json or text"},
		{"addr-file", "CUBE_NODEAGENT_ADDR_FILE", "", "write the bound address here once listening, e.g. with --listen 127.0.0.1:0"},
		{"shutdown-timeout", "CUBE_NODEAGENT_SHUTDOWN_TIMEOUT", "30s", "how long SIGTERM waits for running calls before cutting them"},
	}
}

// OtherVariables are variables read outside Config: by the one-shot build
// and the CLI.
var OtherVariables = []struct{ Env, Doc string }{
	{"CUBE_REGISTRY_PASSWORD", "Registry password for `templatecenter build --registry-username` and `cubemastercli tpl create-from-image --registry-username`, kept out of process listings. The CLI also takes `--registry-password-stdin` or asks on a terminal; its `--registry-password` flag (upstream's) works with a warning."},
	{"CUBE_MASTER_TOKEN", "Bearer token `cubemastercli` sends (`Authorization: Bearer`), one of the master's CUBE_MASTER_AUTH_BEARER_TOKENS; `--token` also works, with a warning (process listings show it)."},
	{"CUBE_MASTER_USER_ID", "User id `cubemastercli` signs requests as (upstream's signed headers, `--user-id`); the master's CUBE_MASTER_AUTH_SECRET_KEYS holds its key."},
	{"CUBE_MASTER_SECRET_KEY", "Secret key `cubemastercli` signs with for CUBE_MASTER_USER_ID; never printed. `--secret-key` also works, with a warning; on a terminal the CLI asks when a user id is given without a key."},
	{"CUBE_ROOTFS_BUILDER_PLUGIN", "Handshake cookie the data plane sets for the builder plugins it starts (hashicorp/go-plugin); a plugin run without it only explains what it is. Never set it yourself."},
	{"CUBE_TEMPLATE_CENTER_TRACE", "File `templatecenter build` writes a Go execution trace of the build to (`go tool trace`)."},
	{"CUBE_TEMPLATE_CENTER_CPUPROFILE", "File `templatecenter build` writes a CPU profile of the build to (pprof format; `make bench -profile` sets it)."},
	{"CUBE_TEMPLATE_CENTER_MEMPROFILE", "File `templatecenter build` writes an allocation profile of the build to (pprof format)."},
}

// ReferenceDirs are the placeholders the reference shows for per-user
// directories.
var ReferenceDirs = Dirs{State: "$STATE_DIR"}

// Reference writes docs/configuration.md: one table of every setting.
func Reference(w io.Writer) error {
	def := DefaultsFor(ReferenceDirs)
	var b strings.Builder
	b.WriteString(`# Configuration reference

<!-- Generated from apps/config (Settings, IgnoredVariables, NodeAgentSettings) by
     go test ./apps/config -run TestConfigurationReference -update; do not edit. -->

Both services read the YAML file named by ` + "`CUBE_TEMPLATE_CENTER_CONFIG_PATH`" + ` first,
then the environment, which wins; command-line flags (` + "`--listen`, `--log-level`, `--insecure-registry`" + `,
...) win over both. A legacy name still works, with a warning at start-up; when both
names are set the new one wins. An unknown ` + "`CUBE_TEMPLATE_CENTER_*`" + ` or ` + "`CUBE_MASTER_*`" + ` variable
is reported at start-up with the nearest known name.

The file may also be upstream's ` + "`conf.yaml`" + `: the keys in the "upstream" column fill a
setting when the file does not set ours, and upstream's other variable names (also in
that column) are read without a warning, after ours. Unknown keys in the file are
warned about by name (` + "`--strict-config`" + ` refuses them); keys of upstream's sections
that no setting reads are listed once. docs/compatibility.md has the details.

` + "`templatecenter serve --print-config`" + ` and
` + "`cubemaster serve --print-config`" + ` print the effective values (secrets redacted) and where each
came from.

` + "`$STATE_DIR`" + ` is ` + "`$XDG_STATE_HOME/cubetemplatecenter`" + ` when XDG_STATE_HOME is set, else
` + "`/var/lib/cubetemplatecenter`" + ` for root and ` + "`~/.local/state/cubetemplatecenter`" + ` for other users:
per user, so a build run by one user never meets a directory another user's build
left unwritable. Durations are Go durations
(` + "`90s`, `10m`, `1h`" + `); lists are comma-separated; maps are JSON objects in the
environment.

| variable | YAML key | default | service | meaning | upstream | legacy names |
|---|---|---|---|---|---|---|
`)
	for _, s := range Settings() {
		d := s.Default
		if d == "" {
			d = render(s.Field(&def))
		}
		yamlKey := s.YAML
		if yamlKey == "" {
			yamlKey = "—"
			if s.Secret {
				yamlKey = "— (secret: environment only)"
			}
		} else {
			yamlKey = "`" + yamlKey + "`"
		}
		if d == "" {
			d = "—"
		} else {
			d = "`" + d + "`"
		}
		legacy := "—"
		if len(s.Legacy) > 0 {
			legacy = "`" + strings.Join(s.Legacy, "`, `") + "`"
		}
		var up []string
		if len(s.Aliases) > 0 {
			up = append(up, "`"+strings.Join(s.Aliases, "`, `")+"`")
		}
		if len(s.Upstream) > 0 {
			up = append(up, "conf.yaml `"+strings.Join(s.Upstream, "`, `")+"`")
		}
		upstream := "—"
		if len(up) > 0 {
			upstream = strings.Join(up, "; ")
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s | %s |\n", s.Env, yamlKey, d, s.Service, cell(s.Doc), upstream, legacy)
	}
	b.WriteString(`
## Accepted and ignored

Upstream variables this service reads only to say, at start-up, that they have no
effect here. They are never reported as unknown.

| variable | legacy names | logged when | why |
|---|---|---|---|
`)
	for _, v := range IgnoredVariables() {
		legacy := "—"
		if len(v.Legacy) > 0 {
			legacy = "`" + strings.Join(v.Legacy, "`, `") + "`"
		}
		when := "set to anything"
		if v.WhenTrue {
			when = "true (`1`, `true`, `yes`, `on`)"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", v.Env, legacy, when, cell(v.Reason))
	}
	b.WriteString(`
## Node agent

` + "`nodeagent`" + ` takes flags; each flag's default comes from its variable when that is set.
A setting without a flag is read from its variable only.

| variable | flag | default | meaning |
|---|---|---|---|
`)
	for _, s := range NodeAgentSettings() {
		d := "—"
		if s.Default != "" {
			d = "`" + s.Default + "`"
		}
		flag := "—"
		if s.Flag != "" {
			flag = "`--" + s.Flag + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", s.Env, flag, d, cell(s.Doc))
	}
	b.WriteString(`
## Other variables

| variable | meaning |
|---|---|
`)
	for _, v := range OtherVariables {
		fmt.Fprintf(&b, "| `%s` | %s |\n", v.Env, cell(v.Doc))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// Print writes the effective configuration of a service: every setting it
// reads with its value (secrets redacted) and where the value came from.
func Print(w io.Writer, c *Config, service string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIABLE\tVALUE\tSOURCE")
	for _, s := range ForService(service) {
		src := c.Sources[s.Env]
		if src == "" {
			src = "default"
		}
		v := s.Value(c)
		if v == "" {
			v = `""`
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Env, v, src)
	}
	return tw.Flush()
}
