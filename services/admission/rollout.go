package admission

import (
	"time"

	"atoll.dev/libs/api"
)

// applyRolloutOperation records a rollout operation (pause, resume, undo
// of an App's zone-by-zone rollout) in next's Control, for the
// aggregator's rollout controller to act on once (it compares the time
// with the last it handled). The write opens a generation like every
// operation, announced as updated.
func applyRolloutOperation(next *api.Workload, op api.Operation, now time.Time) (*change, *Error) {
	if next.Kind != api.KindApp {
		return nil, unsupported(op, "only an App rolls out zone by zone")
	}
	c := &next.Control
	prev := api.RolloutControl{}
	if c.Rollout != nil {
		prev = *c.Rollout
	}
	rc := api.RolloutControl{Paused: prev.Paused, At: after(now, prev.At), Op: op.Op}
	var msg string
	switch op.Op {
	case api.OpRolloutPause:
		rc.Paused, msg = true, "rollout pause requested"
	case api.OpRolloutResume:
		rc.Paused, msg = false, "rollout resume requested"
	case api.OpRolloutUndo:
		rc.Paused, msg = false, "rollout undo requested: every zone returns to the stable template"
	}
	c.Rollout = &rc
	return &change{api.EventUpdated, msg}, nil
}
