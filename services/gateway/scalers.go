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

// GetScalerHistory serves a Scaler's recent decisions.
func (s *Service) GetScalerHistory(w http.ResponseWriter, r *http.Request, project computeapi.ProjectPath, name computeapi.NamePath) {
	if _, _, ok := s.workload(w, r, project, api.KindScaler, name, auth.RoleViewer); !ok {
		return
	}
	out := computeapi.ScalerHistory{Decisions: []computeapi.ScalerDecision{}}
	kv, err := s.js.KeyValue(r.Context(), bus.BucketScalers)
	if err != nil {
		writeRemoteError(w, r, err)
		return
	}
	e, err := kv.Get(r.Context(), api.Key(project, api.KindScaler, name))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		writeJSON(w, http.StatusOK, out) // not evaluated yet
		return
	case err != nil:
		writeRemoteError(w, r, err)
		return
	}
	// The autoscaler's document of the Scaler; the gateway reads its
	// decisions only.
	var st api.ScalerDecisions
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		writeFailure(w, r, http.StatusInternalServerError, "Internal", "the scaler's state is unreadable", err)
		return
	}
	for _, d := range st.Decisions {
		cd := computeapi.ScalerDecision{Time: d.At, Generation: d.Generation, Current: d.Current, Ready: d.Ready, Desired: d.Desired,
			Raw: d.Raw, Stabilized: d.Stabilized, Floor: d.Floor, FloorSchedule: d.FloorSchedule, Limited: d.Limited,
			Reason: d.Reason, Outcome: computeapi.ScalerDecisionOutcome(d.Outcome), Detail: d.Detail}
		for _, p := range d.Proposals {
			cd.Proposals = append(cd.Proposals, computeapi.MetricProposal{Metric: p.Metric, Value: p.Value, Target: p.Target,
				Ratio: p.Ratio, Replicas: p.Replicas, State: computeapi.MetricProposalState(p.State), AgeSeconds: p.Age.Seconds()})
		}
		out.Decisions = append(out.Decisions, cd)
	}
	writeJSON(w, http.StatusOK, out)
}
