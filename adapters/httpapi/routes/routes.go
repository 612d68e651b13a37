package routes

import (
	"net/http"
	"slices"

	"github.com/go-chi/chi/v5"
)

// Kind says how a route is served.
type Kind string

// Route kinds.
const (
	// Internal routes are service-to-service, behind the shared token, with
	// real HTTP statuses.
	Internal Kind = "internal"
	// Public routes answer with the upstream envelope (HTTP 200 + ret_code).
	Public Kind = "public"
	// Download routes serve artifact bytes with real HTTP statuses.
	Download Kind = "download"
	// Proxied routes are forwarded to the template center.
	Proxied Kind = "proxied"
	// Ops routes are health and metrics.
	Ops Kind = "ops"
)

// Route is one registered method+path.
type Route struct {
	Method  string
	Pattern string
	Kind    Kind
}

// Key is "METHOD pattern".
func (r Route) Key() string { return r.Method + " " + r.Pattern }

// Walk lists the method+pattern pairs registered on r, sorted.
func Walk(r chi.Routes) ([]string, error) {
	var out []string
	err := chi.Walk(r, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		out = append(out, method+" "+route)
		return nil
	})
	slices.Sort(out)
	return out, err
}

// Keys lists the keys of a route table, sorted.
func Keys(table []Route) []string {
	out := make([]string, 0, len(table))
	for _, r := range table {
		out = append(out, r.Key())
	}
	slices.Sort(out)
	return out
}

// OfKind filters a route table.
func OfKind(table []Route, k Kind) []Route {
	var out []Route
	for _, r := range table {
		if r.Kind == k {
			out = append(out, r)
		}
	}
	return out
}
