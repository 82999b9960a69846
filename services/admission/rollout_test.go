package admission

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
)

func TestRolloutOperations(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	app := func(rc *api.RolloutControl) *api.Workload {
		return &api.Workload{APIVersion: api.APIVersion, Kind: api.KindApp, Metadata: api.Metadata{Project: "p", Name: "web"},
			Spec:    &api.AppSpec{Common: api.Common{Template: api.PodTemplate{Containers: []api.Container{{Name: "web", Image: "web:v1"}}}}},
			Control: api.Control{Rollout: rc}}
	}
	tests := []struct {
		name string
		cur  *api.Workload
		op   string
		want *api.RolloutControl
		code string // the error's code, "" for none
	}{
		{"pause", app(nil), api.OpRolloutPause, &api.RolloutControl{Paused: true, At: now, Op: api.OpRolloutPause}, ""},
		{"resume", app(&api.RolloutControl{Paused: true, At: now.Add(-time.Minute), Op: api.OpRolloutPause}), api.OpRolloutResume,
			&api.RolloutControl{At: now, Op: api.OpRolloutResume}, ""},
		{"undo", app(nil), api.OpRolloutUndo, &api.RolloutControl{At: now, Op: api.OpRolloutUndo}, ""},
		{"a second operation in the same instant is later", app(&api.RolloutControl{At: now, Op: api.OpRolloutPause, Paused: true}), api.OpRolloutUndo,
			&api.RolloutControl{At: now.Add(time.Nanosecond), Op: api.OpRolloutUndo}, ""},
		{"not an App", &api.Workload{APIVersion: api.APIVersion, Kind: api.KindJobSet, Metadata: api.Metadata{Project: "p", Name: "j"}, Spec: &api.JobSetSpec{}},
			api.OpRolloutPause, nil, "Unsupported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op := api.Operation{Project: "p", Kind: tt.cur.Kind, Name: tt.cur.Metadata.Name, Op: tt.op}
			next, ch, err := applyOperation(tt.cur, op, now)
			code := ""
			if err != nil {
				code = err.Body.Code
			}
			if diff := cmp.Diff(tt.code, code); diff != "" {
				t.Fatalf("error code (-want +got):\n%s", diff)
			}
			if err != nil {
				return
			}
			if ch == nil || ch.event != api.EventUpdated {
				t.Errorf("change %+v, want an updated event", ch)
			}
			if diff := cmp.Diff(tt.want, next.Control.Rollout); diff != "" {
				t.Errorf("control (-want +got):\n%s", diff)
			}
			if tt.cur.Control.Rollout != nil && tt.cur.Control.Rollout == next.Control.Rollout {
				t.Errorf("the stored workload's control was changed in place")
			}
		})
	}
}
