// Package releasemanifeststest is the conformance suite every
// ports.ReleaseManifests runs: no installed manifest is nil and no error;
// a valid manifest comes back with its components (other top-level keys
// are tolerated); a manifest that is present but malformed (not JSON,
// truncated, empty, of the wrong shape) or unreadable is an error and
// never a partial manifest; the manifest is read again after it is
// installed, replaced or removed.
package releasemanifeststest
