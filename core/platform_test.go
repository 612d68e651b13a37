package core_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
)

func TestValidatePlatform(t *testing.T) {
	for _, tc := range []struct {
		platform string
		ok       bool
	}{
		{"linux/amd64", true},
		{"linux/arm64", true},
		{"linux/arm64/v8", true},
		{"linux/arm/v7", true},
		{"linux/amd64/v3", true},
		{"linux/ppc64le", true},
		{"linux/s390x", true},
		{"linux/riscv64", true},
		{"linux/loong64", true},
		{"linux/386", true},
		{"windows/amd64", true},
		{"linux/x86_64", false}, // another tool's name for amd64
		{"linux/arm64/v8_1", false},
		{"linux", false},
		{"linux/", false},
		{"/amd64", false},
		{"linux/amd64/v8/x", false},
		{"Linux/AMD64", false},
		{"linux/amd-64", false},
		{"linux/amd64,osver=1", false},
		{"linux/amd64 ", false},
		{"", false},
		{"linux/" + strings.Repeat("a", 58), true}, // 64 characters
		{"linux/" + strings.Repeat("a", 59), false},
	} {
		err := core.ValidatePlatform(tc.platform)
		var fe *core.FieldError
		switch {
		case tc.ok && err != nil:
			t.Errorf("%q refused: %v", tc.platform, err)
		case !tc.ok && (!errors.As(err, &fe) || fe.Field != "platform" || !errors.Is(err, core.ErrInvalidArgument)):
			t.Errorf("%q: err %v, want a field error on platform", tc.platform, err)
		}
	}
}
