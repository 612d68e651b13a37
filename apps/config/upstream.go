package config

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// upstreamFile is the part of upstream's conf.yaml (CubeMaster's config
// loader, which its template center shares) this service reads. Upstream
// keeps one file per process; a key found here fills the matching setting
// of this service unless the same file sets our own key for it.
type upstreamFile struct {
	Common struct {
		HTTPBind           string `yaml:"http_bind"`
		HTTPPort           int    `yaml:"http_port"`
		TemplateCenterAddr string `yaml:"template_center_addr"`
		MasterAddr         string `yaml:"master_addr"`
	} `yaml:"common"`
	Log struct {
		Region string `yaml:"region"`
	} `yaml:"log"`
	CubeletConf struct {
		EnableExposedPort       *bool    `yaml:"enable_exposed_port"`
		ExposedPortList         []string `yaml:"exposed_port_list"`
		CreateImageTimeoutInSec int      `yaml:"create_image_timeout_insec"`
	} `yaml:"cubelet_conf"`
	ExtraConf struct {
		BlkQos    string            `yaml:"blk_qos"`
		BlkQosMap map[string]string `yaml:"blk_qos_map"`
		FsQos     string            `yaml:"fs_qos"`
		FsQosMap  map[string]string `yaml:"fs_qos_map"`
	} `yaml:"extra_conf"`
	InstanceDB *upstreamDB `yaml:"instance_db_config"`
	Auth       struct {
		Enable                   *bool                        `yaml:"enable"`
		SignatureExpireTimeInSec int                          `yaml:"signature_expire_time_insec"`
		SecretKeyMap             map[string]map[string]string `yaml:"secret_key_map"`
	} `yaml:"auth"`
}

// upstreamDB is upstream's instance_db_config (CubeDB dao.Config).
type upstreamDB struct {
	Driver       string `yaml:"driver"`
	Addr         string `yaml:"addr"`
	User         string `yaml:"user"`
	Pwd          string `yaml:"pwd"`
	DBName       string `yaml:"db_name"`
	ConnTimeout  int    `yaml:"conn_timeout"`
	ReadTimeout  int    `yaml:"read_timeout"`
	WriteTimeout int    `yaml:"write_timeout"`
}

// upstreamSections are the top-level keys of upstream's conf.yaml
// (CubeMaster/pkg/base/config Config, and the shipped files). Keys of these
// sections this service does not read are reported once, never refused.
var upstreamSections = []string{
	"auth", "common", "cubelet_conf", "extra_conf", "hook_whitelist", "instance_db_config", "log",
	"ossdb_config", "redis", "redis_metadata", "redis_read", "redis_write", "req_template_conf",
	"scheduler", "volume_plugins",
}

// DSN turns instance_db_config into a store DSN: MySQL (the default
// driver) as mysql://user:pwd@tcp(addr)/db with upstream's timeouts,
// PostgreSQL as postgres://user:pwd@addr/db. An address without a host
// means localhost, as upstream's dao does.
func (d upstreamDB) DSN() (string, error) {
	if strings.TrimSpace(d.Addr) == "" || strings.TrimSpace(d.DBName) == "" {
		return "", fmt.Errorf("instance_db_config: addr and db_name are required")
	}
	addr := d.Addr
	if host, port, err := net.SplitHostPort(addr); err == nil && host == "" {
		addr = net.JoinHostPort("localhost", port)
	}
	switch strings.ToLower(strings.TrimSpace(d.Driver)) {
	case "", "mysql", "mariadb":
		q := url.Values{"parseTime": {"true"}}
		for name, secs := range map[string]int{"timeout": d.ConnTimeout, "readTimeout": d.ReadTimeout, "writeTimeout": d.WriteTimeout} {
			if secs > 0 {
				q.Set(name, strconv.Itoa(secs)+"s")
			}
		}
		return fmt.Sprintf("mysql://%s:%s@tcp(%s)/%s?%s", d.User, d.Pwd, addr, d.DBName, q.Encode()), nil
	case "postgres", "postgresql", "pg":
		u := url.URL{Scheme: "postgres", User: url.UserPassword(d.User, d.Pwd), Host: addr, Path: "/" + d.DBName}
		if d.ConnTimeout > 0 {
			u.RawQuery = url.Values{"connect_timeout": {strconv.Itoa(d.ConnTimeout)}}.Encode()
		}
		return u.String(), nil
	}
	return "", fmt.Errorf("instance_db_config.driver: %q is not mysql or postgres", d.Driver)
}

// fileKeys is what a config file holds, split by who owns each key.
type fileKeys struct {
	ours     *yaml.Node // a mapping of this service's keys
	upstream *yaml.Node // a mapping of upstream's sections
	set      map[string]bool
}

// splitFile sorts the top-level keys of a config file: this service's,
// upstream's, and unknown ones. Unknown keys, and unknown keys inside this
// service's sections, are reported in warnings naming them; with strict
// they are an error instead. Upstream keys this service does not read are
// reported once per section.
func splitFile(doc *yaml.Node, strict bool) (fileKeys, []string, error) {
	fk := fileKeys{ours: &yaml.Node{Kind: yaml.MappingNode}, upstream: &yaml.Node{Kind: yaml.MappingNode}, set: map[string]bool{}}
	if doc == nil || len(doc.Content) == 0 {
		return fk, nil, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return fk, nil, fmt.Errorf("the file is not a mapping of settings")
	}
	ourType := reflect.TypeOf(Config{})
	var unknown, notes []string
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		ourField := fieldByTag(ourType, k.Value)
		switch {
		case ourField != nil && slices.Contains(upstreamSections, k.Value):
			// A section both files have (log): our keys are ours, the
			// rest upstream's.
			mine, theirs := splitMapping(v, ourField.Type)
			fk.ours.Content = append(fk.ours.Content, k, mine)
			markSet(fk.set, k.Value, mine, ourField.Type)
			fk.upstream.Content = append(fk.upstream.Content, k, theirs)
			if extra := unknownKeys(theirs, upstreamSectionType(k.Value), k.Value); len(extra) > 0 {
				notes = append(notes, fmt.Sprintf("conf.yaml: upstream settings not used by this service: %s", strings.Join(extra, ", ")))
			}
		case ourField != nil:
			fk.ours.Content = append(fk.ours.Content, k, v)
			markSet(fk.set, k.Value, v, fieldByTag(ourType, k.Value).Type)
			unknown = append(unknown, unknownKeys(v, fieldByTag(ourType, k.Value).Type, k.Value)...)
		case slices.Contains(upstreamSections, k.Value):
			fk.upstream.Content = append(fk.upstream.Content, k, v)
			if extra := unknownKeys(v, upstreamSectionType(k.Value), k.Value); len(extra) > 0 {
				notes = append(notes, fmt.Sprintf("conf.yaml: upstream settings not used by this service: %s", strings.Join(extra, ", ")))
			}
		default:
			unknown = append(unknown, k.Value)
		}
	}
	sort.Strings(unknown)
	if strict && len(unknown) > 0 {
		return fk, nil, fmt.Errorf("unknown settings (--strict-config): %s", strings.Join(unknown, ", "))
	}
	var warnings []string
	for _, k := range unknown {
		warnings = append(warnings, fmt.Sprintf("conf.yaml: unknown setting %q ignored", k))
	}
	return fk, append(warnings, notes...), nil
}

// splitMapping splits mapping node n into the keys struct type t has a
// field for and the others. A node that is not a mapping is all t's (the
// decoder then names the mismatch).
func splitMapping(n *yaml.Node, t reflect.Type) (mine, theirs *yaml.Node) {
	mine, theirs = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}, &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	if n.Kind != yaml.MappingNode {
		return n, theirs
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if fieldByTag(t, n.Content[i].Value) != nil {
			mine.Content = append(mine.Content, n.Content[i], n.Content[i+1])
		} else {
			theirs.Content = append(theirs.Content, n.Content[i], n.Content[i+1])
		}
	}
	return mine, theirs
}

// upstreamSectionType is the type this service decodes an upstream
// section into (nil: none of it is read).
func upstreamSectionType(section string) reflect.Type {
	if f := fieldByTag(reflect.TypeOf(upstreamFile{}), section); f != nil {
		return f.Type
	}
	return nil
}

// fieldByTag finds the struct field of t (after pointers) whose yaml name
// is name.
func fieldByTag(t reflect.Type, name string) *reflect.StructField {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag != "" && tag != "-" && tag == name {
			return &f
		}
	}
	return nil
}

// unknownKeys lists the keys of mapping node n (recursively, as
// "prefix.key") that struct type t has no field for. Non-struct types
// (maps, lists, scalars) accept anything; a nil t accepts nothing.
func unknownKeys(n *yaml.Node, t reflect.Type, prefix string) []string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind != yaml.MappingNode || (t != nil && t.Kind() != reflect.Struct) {
		return nil
	}
	var out []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i].Value, n.Content[i+1]
		f := fieldByTag(t, k)
		if f == nil {
			out = append(out, prefix+"."+k)
			continue
		}
		out = append(out, unknownKeys(v, f.Type, prefix+"."+k)...)
	}
	return out
}

// markSet records the dotted names of the settings the file sets, down
// through our sections, so upstream keys never override them.
func markSet(set map[string]bool, key string, v *yaml.Node, t reflect.Type) {
	set[key] = true
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v.Kind != yaml.MappingNode || t.Kind() != reflect.Struct {
		return
	}
	for i := 0; i+1 < len(v.Content); i += 2 {
		if f := fieldByTag(t, v.Content[i].Value); f != nil {
			markSet(set, key+"."+v.Content[i].Value, v.Content[i+1], f.Type)
		}
	}
}

// applyUpstream fills this service's settings from upstream's keys where
// the file does not set ours, recording where each value came from.
func (c *Config) applyUpstream(u upstreamFile, set map[string]bool) error {
	from := func(env, key string) { c.Sources[env] = "file (upstream " + key + ")" }
	if listen := upstreamListen(u.Common.HTTPBind, u.Common.HTTPPort); listen != "" {
		// Each upstream process reads its own file, so the address is the
		// one of whichever service reads this file.
		if !set["listen"] {
			c.Listen, c.listenFromBind = listen, strings.TrimSpace(u.Common.HTTPBind)
			from("CUBE_TEMPLATE_CENTER_LISTEN", "common.http_bind/http_port")
		}
		if !set["master.listen"] {
			c.Master.Listen = listen
			from("CUBE_MASTER_LISTEN", "common.http_bind/http_port")
		}
	}
	if v := strings.TrimSpace(u.Common.TemplateCenterAddr); v != "" && !set["master.template_center_addr"] {
		c.Master.TemplateCenterAddr = v
		from("CUBE_TEMPLATE_CENTER_ADDR", "common.template_center_addr")
	}
	if v := strings.TrimSpace(u.Common.MasterAddr); v != "" && !set["master_addr"] {
		c.MasterAddr = v
		from("CUBE_MASTER_ADDR", "common.master_addr")
	}
	if u.InstanceDB != nil && !set["db_dsn"] {
		dsn, err := u.InstanceDB.DSN()
		if err != nil {
			return err
		}
		c.DBDSN = dsn
		from("CUBE_TEMPLATE_CENTER_DB_DSN", "instance_db_config")
	}
	r := &c.Master.Request
	if v := u.CubeletConf.EnableExposedPort; v != nil && !set["master.request.enable_exposed_port"] {
		r.EnableExposedPort = *v
		from("CUBE_MASTER_ENABLE_EXPOSED_PORT", "cubelet_conf.enable_exposed_port")
	}
	if u.CubeletConf.ExposedPortList != nil && !set["master.request.exposed_port_list"] {
		r.ExposedPortList = u.CubeletConf.ExposedPortList
		from("CUBE_MASTER_EXPOSED_PORTS", "cubelet_conf.exposed_port_list")
	}
	if s := u.CubeletConf.CreateImageTimeoutInSec; s > 0 && !set["master.request.create_image_timeout"] {
		r.CreateImageTimeout = secondsDuration(s)
		from("CUBE_MASTER_CREATE_IMAGE_TIMEOUT", "cubelet_conf.create_image_timeout_insec")
	}
	if v := u.ExtraConf.BlkQos; v != "" && !set["master.request.blk_qos"] {
		r.BlkQos = v
		from("CUBE_MASTER_BLK_QOS", "extra_conf.blk_qos")
	}
	if u.ExtraConf.BlkQosMap != nil && !set["master.request.blk_qos_map"] {
		r.BlkQosMap = u.ExtraConf.BlkQosMap
		from("CUBE_MASTER_BLK_QOS_MAP", "extra_conf.blk_qos_map")
	}
	if v := u.ExtraConf.FsQos; v != "" && !set["master.request.fs_qos"] {
		r.FsQos = v
		from("CUBE_MASTER_FS_QOS", "extra_conf.fs_qos")
	}
	if u.ExtraConf.FsQosMap != nil && !set["master.request.fs_qos_map"] {
		r.FsQosMap = u.ExtraConf.FsQosMap
		from("CUBE_MASTER_FS_QOS_MAP", "extra_conf.fs_qos_map")
	}
	if v := u.Log.Region; v != "" && !set["master.request.region"] {
		r.Region = v
		from("CUBE_MASTER_REGION", "log.region")
	}
	a := &c.Master.Auth
	if v := u.Auth.Enable; v != nil && !set["master.auth.enabled"] {
		a.Enabled = *v
		from("CUBE_MASTER_AUTH", "auth.enable")
	}
	if s := u.Auth.SignatureExpireTimeInSec; s > 0 && !set["master.auth.expiry"] {
		a.Expiry = secondsDuration(s)
		from("CUBE_MASTER_AUTH_EXPIRY", "auth.signature_expire_time_insec")
	}
	if len(u.Auth.SecretKeyMap) > 0 {
		keys, err := mergeSecretKeyMap(u.Auth.SecretKeyMap)
		if err != nil {
			return err
		}
		a.SecretKeys = keys
		from("CUBE_MASTER_AUTH_SECRET_KEYS", "auth.secret_key_map")
	}
	return nil
}

// mergeSecretKeyMap flattens upstream's auth.secret_key_map (group ->
// user id -> secret key) into one map by user id. A user in two groups
// must have one secret; errors never quote a secret.
func mergeSecretKeyMap(groups map[string]map[string]string) (UserSecrets, error) {
	out := UserSecrets{}
	owner := map[string]string{}
	for _, g := range slices.Sorted(maps.Keys(groups)) {
		for user, secret := range groups[g] {
			if strings.TrimSpace(user) == "" || strings.TrimSpace(secret) == "" {
				return nil, fmt.Errorf("auth.secret_key_map.%s: user %q has an empty user id or secret key", g, user)
			}
			if prev, ok := out[user]; ok && prev != secret {
				return nil, fmt.Errorf("auth.secret_key_map: user %q has different secret keys in groups %s and %s", user, owner[user], g)
			}
			out[user], owner[user] = secret, g
		}
	}
	return out, nil
}

// upstreamListen is http_bind:http_port; either alone keeps the other's
// upstream default (all interfaces, no port: "").
func upstreamListen(bind string, port int) string {
	bind = strings.TrimSpace(bind)
	if port <= 0 {
		return ""
	}
	return net.JoinHostPort(bind, strconv.Itoa(port))
}

// loadFile reads a config file: this service's keys, then upstream's.
func (c *Config) loadFile(path string, r *reader) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config file %s (%s): %w", path, PathVariable, err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("parse config file %s: %w", path, err)
	}
	fk, warnings, err := splitFile(&doc, c.Strict)
	if err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	r.warnings = append(r.warnings, warnings...)
	if err := fk.ours.Decode(c); err != nil {
		return fmt.Errorf("parse config file %s: %w", path, err)
	}
	var u upstreamFile
	if err := fk.upstream.Decode(&u); err != nil {
		return fmt.Errorf("parse config file %s (upstream settings): %w", path, err)
	}
	markFileSources(c, b)
	if err := c.applyUpstream(u, fk.set); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	if fk.set["listen"] {
		c.listenExplicit = true
	}
	return nil
}

// readUpstreamEnv applies what upstream's environment means beyond the
// settings' values: the variables accepted and ignored (IgnoredVariables)
// are logged, and CUBE_ARTIFACT_STORE_BACKEND=fs turns S3 off; any other
// value is upstream's default, S3 when fully configured.
func (r *reader) readUpstreamEnv(c *Config) {
	for _, v := range IgnoredVariables() {
		if val, ok := r.lookup(v.Env, v.Legacy...); ok && v.active(val) {
			r.warnings = append(r.warnings, v.Env+" is ignored because "+v.Reason)
		}
	}
	switch strings.ToLower(strings.TrimSpace(c.ArtifactStoreBackend)) {
	case "fs":
		c.S3.Off = true
	case "", "s3":
	default:
		r.warnings = append(r.warnings, fmt.Sprintf("CUBE_ARTIFACT_STORE_BACKEND=%q is read as s3, as upstream reads an unknown value", c.ArtifactStoreBackend))
	}
}

// TemplateCenterListen is the data plane's listen address, narrowed to
// NodeIP the way upstream's ResolveHTTPBind does: only when no address was
// chosen explicitly (CUBE_TEMPLATE_CENTER_LISTEN, listen, or an http_bind
// other than 0.0.0.0 or ::) and NodeIP is an address of this host
// (isLocal). note explains a deviation, for the log.
func (c Config) TemplateCenterListen(isLocal func(net.IP) bool) (addr, note string) {
	if c.NodeIP == "" {
		return c.Listen, ""
	}
	explicit := c.listenExplicit || (c.listenFromBind != "" && c.listenFromBind != "0.0.0.0" && c.listenFromBind != "::")
	if explicit {
		return c.Listen, fmt.Sprintf("node IP %s not used for the listen address: %s was set explicitly", c.NodeIP, c.Listen)
	}
	ip := net.ParseIP(c.NodeIP)
	if ip == nil {
		return c.Listen, fmt.Sprintf("node IP %q is not an IP address; listening on %s", c.NodeIP, c.Listen)
	}
	if isLocal == nil || !isLocal(ip) {
		return c.Listen, fmt.Sprintf("node IP %s is not an address of this host (inside a pod it is not); listening on %s", c.NodeIP, c.Listen)
	}
	_, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return c.Listen, ""
	}
	return net.JoinHostPort(ip.String(), port), fmt.Sprintf("listening on %s from the node IP", ip)
}

// IsLocalIP reports whether ip is assigned to an interface of this host.
func IsLocalIP(ip net.IP) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

func secondsDuration(s int) time.Duration { return time.Duration(s) * time.Second }

// upstreamTruthy is upstream tcconfig's reading of a switch: 1, true, yes
// or on, any case; anything else is off.
func upstreamTruthy(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}
