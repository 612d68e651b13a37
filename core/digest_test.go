package core_test

import (
	"strings"
	"testing"

	"github.com/cubesandbox/templatecenter/core"
)

func TestIsSHA256Hex(t *testing.T) {
	sum, _, err := core.SHA256Of(strings.NewReader("cube"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{sum, true},
		{strings.Repeat("0", 64), true},
		{strings.Repeat("AB", 32), false}, // uppercase is not how sums are written
		{sum[:63], false},
		{sum + "0", false},
		{strings.Repeat("g", 64), false},
		{"", false},
	} {
		if got := core.IsSHA256Hex(tc.s); got != tc.want {
			t.Errorf("IsSHA256Hex(%q) = %v, want %v", tc.s, got, tc.want)
		}
	}
}
