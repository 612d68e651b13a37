package entstore_test

import (
	"flag"
	"os"
	"testing"
)

// TestMain raises the default test parallelism: the store tests mostly wait
// on database servers (CREATE DATABASE, fsync, lock waits), not on the CPU.
// An explicit -test.parallel still wins.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", "6")
	}
	os.Exit(m.Run())
}
