package main

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
)

// TestDevRegistryPortIsStable: the example registry has a fixed default
// address (the example image keeps its name between runs); when that port
// is taken a free one is used and the user is told, unless they chose the
// address, which then fails as any taken address does.
func TestDevRegistryPortIsStable(t *testing.T) {
	if f := devCommand().Flags().Lookup("registry-listen"); f == nil || f.DefValue != DefaultRegistryListen || strings.HasSuffix(f.DefValue, ":0") {
		t.Fatalf("--registry-listen default %v, want the fixed %s", f, DefaultRegistryListen)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	var warn bytes.Buffer
	ln, err := listenFallback("registry-listen", busy.Addr().String(), false, &warn)
	if err != nil {
		t.Fatalf("default address taken: %v, want a free port instead", err)
	}
	defer ln.Close()
	if ln.Addr().String() == busy.Addr().String() || !strings.Contains(warn.String(), busy.Addr().String()+" is taken") {
		t.Fatalf("listening on %s, warning %q", ln.Addr(), warn.String())
	}
	if _, err := listenFallback("registry-listen", busy.Addr().String(), true, &warn); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("a chosen address that is taken: %v, want the error", err)
	}
}
