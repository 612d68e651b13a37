// Package storetest is the conformance suite every ports.Store adapter runs:
// create/read/update/delete, not-found and conflict errors of each
// repository, byte-exact aliases, the job compare-and-set under concurrent
// writers, terminal absorption, the active key of invariant I1 (directly and
// through jobs.Service.SubmitFromImage with 32 concurrent submitters), stale
// job queries, reference counting, placements and transactions.
//
// An adapter runs it from a small harness test:
//
//	func TestConformance(t *testing.T) {
//		storetest.RunConformanceTests(t, func(t *testing.T) storetest.Harness {
//			return myHarness{store: openFreshMigratedStore(t)}
//		})
//	}
package storetest
