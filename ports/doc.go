// Package ports declares the interfaces core uses to reach the outside world:
// the metadata store and its repositories, locks, the clock and id source,
// image sources, rootfs builders, artifact stores, node agents, the node
// directory, progress sinks and the two directions between control plane and
// data plane. Each interface documents its contract; each has a conformance
// suite in a sibling package (storetest, lockertest, ...) that every adapter
// runs, and a moq mock in portsmock for core's unit tests.
package ports

//go:generate go tool moq -rm -pkg portsmock -out portsmock/mocks.go . Store Repos JobRepository TemplateRepository ArtifactRepository PlacementRepository NodeRepository NameRepository PolicyRepository Locker Lock Sealer Clock IDs ImageSource TreeFlattener RootfsBuilder ArtifactStore ChunkStore NodeDirectory NodeAgent ProgressSink DataPlane StatusReporter EnvdSource CubeCASource LegacyArtifacts ReleaseManifests JobLog
