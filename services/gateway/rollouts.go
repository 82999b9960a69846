package gateway

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/gateway/auth"
)

// GetRollout serves an App's zone-by-zone rollout, read from bucket
// rollouts (written by the aggregator's rollout controller only).
func (s *Service) GetRollout(w http.ResponseWriter, r *http.Request, project computeapi.ProjectPath, app string) {
	if _, _, ok := s.workload(w, r, project, api.KindLabel(api.KindApp), app, auth.RoleViewer); !ok {
		return
	}
	out := computeapi.Rollout{Phase: computeapi.RolloutPhase(api.RolloutComplete), Zones: []computeapi.ZoneRollout{}}
	kv, err := s.js.KeyValue(r.Context(), bus.BucketRollouts)
	if err != nil {
		writeRemoteError(w, r, err)
		return
	}
	e, err := kv.Get(r.Context(), api.Key(project, api.KindApp, app))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		writeJSON(w, http.StatusOK, out) // not looked at yet: nothing to roll
		return
	case err != nil:
		writeRemoteError(w, r, err)
		return
	}
	var ro api.Rollout
	if err := json.Unmarshal(e.Value(), &ro); err != nil {
		writeFailure(w, r, http.StatusInternalServerError, "Internal", "the rollout's state is unreadable", err)
		return
	}
	out = computeapi.Rollout{Phase: computeapi.RolloutPhase(ro.Phase), Stable: ro.Stable, Target: ro.Target,
		Abandoned: ro.Abandoned, Message: ro.Message, Updated: ro.Updated, Zones: []computeapi.ZoneRollout{}}
	for _, z := range ro.Zones {
		out.Zones = append(out.Zones, computeapi.ZoneRollout{Zone: z.Zone, State: computeapi.ZoneRolloutState(z.State),
			Revision: z.Revision, Started: z.Started, AvailableSince: z.AvailableSince, Finished: z.Finished, Message: z.Message})
	}
	writeJSON(w, http.StatusOK, out)
}

// OperateRollout pauses, resumes or undoes an App's rollout: an operation
// through admission, recorded in the App for the rollout controller.
func (s *Service) OperateRollout(w http.ResponseWriter, r *http.Request, project computeapi.ProjectPath, app string, action string) {
	switch action {
	case "pause", "resume", "undo":
	default:
		writeErrorBody(w, r, http.StatusBadRequest, apiError(api.ErrorBody{Code: "Invalid", Message: "unknown rollout action " + action,
			Fields: api.FieldErrors{{Field: "action", Code: api.CodeUnsupported, Reason: "one of pause, resume, undo"}}}))
		return
	}
	s.operate(w, r, project, api.KindLabel(api.KindApp), app, api.Operation{Op: "rollout-" + action})
}
