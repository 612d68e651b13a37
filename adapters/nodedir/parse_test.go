package nodedir

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
	"github.com/cubesandbox/templatecenter/ports"
)

func TestParse(t *testing.T) {
	cases := []struct {
		name string
		spec string
		want []ports.Node
	}{
		{"empty", "", nil},
		{"blanks only", " , ,", nil},
		{"one", "node-1=127.0.0.1:7001", []ports.Node{{ID: "node-1", IP: "127.0.0.1", Addr: "127.0.0.1:7001", InstanceType: "cubebox"}}},
		{"two with instance type and spaces", " node-1=127.0.0.1:7001 , node-2 = 10.0.0.2:7001@gpu.large ", []ports.Node{
			{ID: "node-1", IP: "127.0.0.1", Addr: "127.0.0.1:7001", InstanceType: "cubebox"},
			{ID: "node-2", IP: "10.0.0.2", Addr: "10.0.0.2:7001", InstanceType: "gpu.large"},
		}},
		{"ipv6", "n6=[::1]:7001", []ports.Node{{ID: "n6", IP: "::1", Addr: "[::1]:7001", InstanceType: "cubebox"}}},
		{"host name", "n=agent.internal:7001", []ports.Node{{ID: "n", IP: "agent.internal", Addr: "agent.internal:7001", InstanceType: "cubebox"}}},
		{"same ip, two ports", "a=127.0.0.1:7001,b=127.0.0.1:7002", []ports.Node{
			{ID: "a", IP: "127.0.0.1", Addr: "127.0.0.1:7001", InstanceType: "cubebox"},
			{ID: "b", IP: "127.0.0.1", Addr: "127.0.0.1:7002", InstanceType: "cubebox"},
		}},
		{"trailing comma", "a=127.0.0.1:7001,", []ports.Node{{ID: "a", IP: "127.0.0.1", Addr: "127.0.0.1:7001", InstanceType: "cubebox"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Parse(%q) = %+v, want %+v", tc.spec, got, tc.want)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	cases := []struct {
		spec, field, reason string
	}{
		{"127.0.0.1:7001", "nodes[0]", "want id=host:port"},
		{"=127.0.0.1:7001", "nodes[0]", "node id"},
		{"bad id=127.0.0.1:7001", "nodes[0]", "node id"},
		{"a=127.0.0.1", "nodes[0]", "not host:port"},
		{"a=:7001", "nodes[0]", "no host"},
		{"a=127.0.0.1:0", "nodes[0]", "port must be"},
		{"a=127.0.0.1:http", "nodes[0]", "port must be"},
		{"a=127.0.0.1:99999", "nodes[0]", "port must be"},
		{"a=127.0.0.1:7001@", "nodes[0]", "instance type"},
		{"a=127.0.0.1:7001@x y", "nodes[0]", "instance type"},
		{"a=127.0.0.1:7001,a=127.0.0.1:7002", "nodes[1]", "already used by nodes[0]"},
		{"a=127.0.0.1:7001,b=127.0.0.1:7001", "nodes[1]", "already used by nodes[0]"},
	}
	for _, tc := range cases {
		t.Run(tc.spec, func(t *testing.T) {
			_, err := Parse(tc.spec)
			var fe *core.FieldError
			if !errors.As(err, &fe) || !errors.Is(err, core.ErrInvalidArgument) {
				t.Fatalf("Parse(%q) err = %v, want a *core.FieldError", tc.spec, err)
			}
			if fe.Field != tc.field || !strings.Contains(fe.Reason, tc.reason) {
				t.Fatalf("Parse(%q) = field %q reason %q, want field %q reason containing %q", tc.spec, fe.Field, fe.Reason, tc.field, tc.reason)
			}
		})
	}
}
