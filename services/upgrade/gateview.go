package upgrade

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// The SLO gate reads, each tick of an active plan, every App's ready
// count in the current cluster and its availability budget. Reading them
// from the buckets each tick cost a round trip per status and per App (at
// 100,000 workloads, minutes a tick); reading them from mirrors started at
// the replica's start would make every start load the region. So the gate
// reads a projection of both buckets (per status, each cluster's desired
// and ready counts; per App, its budget) that the leading replica mirrors
// only while a plan is active: started by the first gate reading, stopped
// by the first reconcile that finds no plan active and by the end of the
// term.

// viewWait bounds how long a tick waits for the view's first replay; a
// gate still loading then holds (a breach to confirm), it does not pass.
const viewWait = 30 * time.Second

// shareCounts are a status's counts in one member cluster.
type shareCounts struct{ Desired, Ready int32 }

// appBudget is an App's availability budget, as a PodDisruptionBudget
// says it ("maxUnavailable" or "minAvailable", and its value); App false
// for a workload of another kind.
type appBudget struct {
	App         bool
	Kind, Value string
}

// gateView is the gate's projection of the statuses and workloads
// buckets.
type gateView struct {
	shares  *bus.TypedMirror[map[string]shareCounts]
	budgets *bus.TypedMirror[appBudget]
}

func decodeShares(b []byte) (map[string]shareCounts, error) {
	var st api.Status
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, err
	}
	out := make(map[string]shareCounts, len(st.Clusters))
	for name, z := range st.Clusters {
		if z.Desired > 0 {
			out[name] = shareCounts{Desired: z.Desired, Ready: z.Ready}
		}
	}
	return out, nil
}

func decodeBudget(b []byte) (appBudget, error) {
	w, err := api.Decode(b)
	if err != nil {
		return appBudget{}, err
	}
	spec, ok := w.Spec.(*api.AppSpec)
	if w.Kind != api.KindApp || !ok || spec == nil {
		return appBudget{}, nil
	}
	kind, v := spec.Availability.Budget()
	return appBudget{App: true, Kind: kind, Value: v}, nil
}

// view returns the gate's view, starting it if needed and waiting for its
// first replay (up to viewWait). Only the lead goroutine calls it.
func (s *Service) view(ctx context.Context) (*gateView, error) {
	if s.gv == nil {
		shares, err := bus.MirrorOf(context.WithoutCancel(ctx), s.bus, bus.BucketStatus, jetstream.AllKeys, decodeShares, nil)
		if err != nil {
			return nil, fmt.Errorf("mirror %s: %w", bus.BucketStatus, err)
		}
		budgets, err := bus.MirrorOf(context.WithoutCancel(ctx), s.bus, bus.BucketWorkloads, jetstream.AllKeys, decodeBudget, nil)
		if err != nil {
			shares.Stop()
			return nil, fmt.Errorf("mirror %s: %w", bus.BucketWorkloads, err)
		}
		s.gv = &gateView{shares: shares, budgets: budgets}
		s.log.Info("gate view started: mirroring statuses and workloads while a plan is active")
	}
	wctx, cancel := context.WithTimeout(ctx, viewWait)
	defer cancel()
	for _, ready := range []<-chan struct{}{s.gv.shares.Ready(), s.gv.budgets.Ready()} {
		select {
		case <-ready:
		case <-wctx.Done():
			return nil, fmt.Errorf("gate view still loading after %s", viewWait)
		}
	}
	return s.gv, nil
}

// stopView stops the gate's view, if started. Only the lead goroutine
// calls it.
func (s *Service) stopView() {
	if s.gv == nil {
		return
	}
	s.gv.shares.Stop()
	s.gv.budgets.Stop()
	s.gv = nil
	s.log.Info("gate view stopped: no plan active")
}
