// Package hostfiles implements the ports backed by files on the service's
// own host: the envd binary injected into templates (ports.EnvdSource),
// the CubeEgress root CA baked into them (ports.CubeCASource),
// legacy artifacts on the master's disk for migrate (ports.LegacyArtifacts)
// and the release manifest compat checks use (ports.ReleaseManifests).
package hostfiles
