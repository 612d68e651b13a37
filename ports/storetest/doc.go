// Package storetest is the conformance suite every ports.Store adapter runs:
// create/read/update/delete, not-found and conflict errors of each
// repository, byte-exact aliases, the job compare-and-set under concurrent
// writers, terminal absorption, invariant I1 as the store enforces it (the
// unique active key and the other unique job keys under Submitters
// concurrent writers, plain and in transactions), stale job queries,
// reference counting, placements, nodes, transactions (atomicity, isolation
// of uncommitted writes, concurrent transactions, Update fns that call the
// store) and copying values in and out.
//
// An adapter runs it from a small harness test:
//
//	type harness struct{ ... }
//
//	func (h *harness) MakeStore(ctx context.Context) (ports.Store, error) {
//		return openFreshMigratedStore(ctx) // and remember it for Close
//	}
//
//	func (h *harness) Close() { ... }
//
//	func TestConformance(t *testing.T) {
//		storetest.RunConformanceTests(t, func(ctx context.Context, t *testing.T) (storetest.Harness, error) {
//			return &harness{}, nil
//		})
//	}
package storetest
