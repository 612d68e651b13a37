package system

import (
	"regexp"
	"testing"
	"time"
)

func TestIDs(t *testing.T) {
	var ids IDs
	uuidRe := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for i := 0; i < 100; i++ {
		j, h, tok := ids.NewJobID(), ids.NewHex(), ids.NewToken()
		if !uuidRe.MatchString(j) || len(h) != 32 || len(tok) != 64 {
			t.Fatalf("bad ids %q %q %q", j, h, tok)
		}
		for _, v := range []string{j, h, tok} {
			if seen[v] {
				t.Fatalf("duplicate id %s", v)
			}
			seen[v] = true
		}
	}
}

func TestClock(t *testing.T) {
	if d := time.Since(Clock{}.Now()); d < 0 || d > time.Minute {
		t.Fatalf("clock off by %v", d)
	}
}
