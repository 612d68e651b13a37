package plugin

import (
	"github.com/cubesandbox/templatecenter/core/pipeline"
	"github.com/cubesandbox/templatecenter/ports"
)

// StagePrefix starts the name of the directory the host makes beside a
// build's output for the plugin to write in (see staged).
const StagePrefix = ".cube-plugin-"

// StageGrace is how long a stage directory that no host holds must have
// gone unmodified before a build beside it removes it: a host makes its
// directory, then locks it, and the grace covers that instant.
const StageGrace = pipeline.StageGrace

// staged runs build with spec.OutPath moved into a stage directory beside
// it, made and held by the host (pipeline.NewStage, StagePrefix), then moves the
// finished image onto spec.OutPath. The plugin writes its temporary image
// (and the host its tree pipe) beside the path it is given, so everything
// either writes lies under a name the host knows: the directory is removed
// on every way out, whether the plugin failed, the build was cancelled or
// the plugin process was killed before it could clean up after itself.
//
// The host holds a flock on the directory while the build runs. The kernel
// drops it however the host dies (its plugin dies with it, diesWithHost),
// so the next build beside that output removes the directories of dead
// hosts (pipeline.SweepStages) instead of leaving a whole image there for good.
func staged(spec ports.BuildSpec, build func(ports.BuildSpec) (ports.BuildResult, error)) (ports.BuildResult, error) {
	if spec.OutPath == "" {
		return build(spec) // the plugin says what is wrong with it
	}
	st, err := pipeline.NewStage(spec.OutPath, StagePrefix)
	if err != nil {
		return ports.BuildResult{}, err
	}
	defer st.Remove()
	out := spec.OutPath
	spec.OutPath = st.Path(out)
	res, err := build(spec)
	if err != nil {
		return res, err
	}
	if err := st.Publish(out); err != nil {
		return ports.BuildResult{}, err
	}
	return res, nil
}
