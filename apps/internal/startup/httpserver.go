package startup

import (
	"net/http"
	"time"
)

// ServerTimeouts bound how long a client may hold a connection of the
// HTTP servers (cubemaster's and templatecenter's) without finishing what
// it is sending, so that clients trickling bytes (slowloris) cannot pin
// connections and goroutines. Zero fields take the defaults.
//
// There is deliberately no write timeout: it would cap how long an
// artifact download may take (upstream's 360 s did). Uploads, the one
// long request body, replace the read timeout with an idle one
// (tcapi.Config.UploadIdleTimeout).
type ServerTimeouts struct {
	// ReadHeader bounds reading a request's headers.
	ReadHeader time.Duration
	// Read bounds reading a whole request, body included (upstream: 120 s).
	Read time.Duration
	// Idle bounds how long a keep-alive connection waits for the next
	// request (upstream: 360 s).
	Idle time.Duration
}

// DefaultServerTimeouts are the timeouts the servers run with.
var DefaultServerTimeouts = ServerTimeouts{ReadHeader: 30 * time.Second, Read: 120 * time.Second, Idle: 360 * time.Second}

func (t ServerTimeouts) withDefaults() ServerTimeouts {
	d := DefaultServerTimeouts
	if t.ReadHeader <= 0 {
		t.ReadHeader = d.ReadHeader
	}
	if t.Read <= 0 {
		t.Read = d.Read
	}
	if t.Idle <= 0 {
		t.Idle = d.Idle
	}
	return t
}

// HTTPServer is the server both services serve their router with.
func HTTPServer(h http.Handler, t ServerTimeouts) *http.Server {
	t = t.withDefaults()
	return &http.Server{Handler: h, ReadHeaderTimeout: t.ReadHeader, ReadTimeout: t.Read, IdleTimeout: t.Idle}
}
