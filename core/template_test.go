package core_test

import (
	"testing"

	"github.com/cubesandbox/templatecenter/core"
)

func TestSummarizeReplicas(t *testing.T) {
	r := func(s core.ReplicaStatus) core.Replica { return core.Replica{Status: s} }
	tests := []struct {
		name string
		in   []core.Replica
		want core.TemplateStatus
	}{
		{"none", nil, core.TemplateFailed},
		{"one ready", []core.Replica{r(core.ReplicaReady)}, core.TemplateReady},
		{"all ready", []core.Replica{r(core.ReplicaReady), r(core.ReplicaReady), r(core.ReplicaReady)}, core.TemplateReady},
		{"some ready", []core.Replica{r(core.ReplicaFailed), r(core.ReplicaReady), r(core.ReplicaFailed)}, core.TemplatePartiallyReady},
		{"all failed", []core.Replica{r(core.ReplicaFailed), r(core.ReplicaFailed)}, core.TemplateFailed},
		{"unknown status is not ready", []core.Replica{r(core.ReplicaReady), r("")}, core.TemplatePartiallyReady},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := core.SummarizeReplicas(tc.in); got != tc.want {
				t.Errorf("SummarizeReplicas = %s, want %s", got, tc.want)
			}
		})
	}
}
