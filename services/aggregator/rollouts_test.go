package aggregator

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// rolloutTermRun runs terms of LeaseRollout on a replica that observes no
// cluster itself (the test writes the observations).
type rolloutTermRun struct {
	s      *Service
	cancel context.CancelFunc
	done   chan struct{}
}

func (r *rolloutTermRun) start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan struct{})
	go func() { defer close(r.done); r.s.leadRollouts(ctx) }()
}

func (r *rolloutTermRun) stop() {
	r.cancel()
	<-r.done
}

// TestRolloutController drives the rollout controller with hand-written
// workloads, placements and observations: a template change starts zone
// a only, zone b starts once zone a shows the new template available (no
// bake here), and an event lost between a rollout write and its publish
// is published by the next term, once, under that write's revision.
func TestRolloutController(t *testing.T) {
	b := openBus(t)
	ctx := context.Background()
	s := newFoldingReplica(t, b, "zone-a", "zone-b")
	WithRolloutTick(50 * time.Millisecond)(s)
	zero := int32(0)
	tmpl := func(image string) api.PodTemplate {
		return api.PodTemplate{Containers: []api.Container{{Name: "web", Image: image}}}
	}
	four := int32(4)
	w := &api.Workload{APIVersion: api.APIVersion, Kind: api.KindApp, Metadata: api.Metadata{Project: "p", Name: "web", Generation: 1},
		Spec: &api.AppSpec{Common: api.Common{Template: tmpl("web:v1")}, Replicas: &four, Rollout: &api.RolloutStrategy{BakeSeconds: &zero}}}
	key := w.Key()
	// put writes generation gen of w, its placement and the zones' observations
	// (a zone named in onTarget runs the spec's template, all available).
	put := func(gen int64, onTarget ...string) {
		w.Metadata.Generation = gen
		putJSON(t, b, bus.BucketWorkloads, key, w)
		putJSON(t, b, bus.BucketPlacements, key, api.PlacementDecision{Key: key, Generation: gen, Shards: []api.Shard{
			{Cluster: "zone-a", Zone: "a", Replicas: 2}, {Cluster: "zone-b", Zone: "b", Replicas: 2}}})
		stable := api.TemplateHash(&w.Spec.(*api.AppSpec).Template)
		for _, c := range []string{"zone-a", "zone-b"} {
			h := "older"
			if gen == 1 {
				h = stable
			}
			for _, z := range onTarget {
				if "zone-"+z == c {
					h = stable
				}
			}
			putJSON(t, b, bus.BucketObservations, observationKey(c, key), observation{Part: &appPart{Deployment: &deploymentObservation{
				Generation: gen, Observed: true, Replicas: 2, Updated: 2, Available: 2, Template: h}}})
		}
	}
	rollout := func() (*api.Rollout, uint64) {
		kv, err := b.KV(ctx, bus.BucketRollouts)
		require.NoError(t, err)
		e, err := kv.Get(ctx, key)
		if err != nil {
			return nil, 0
		}
		var r api.Rollout
		require.NoError(t, json.Unmarshal(e.Value(), &r))
		return &r, e.Revision()
	}
	states := func() string {
		r, _ := rollout()
		if r == nil {
			return "none"
		}
		out := r.Phase
		for _, z := range r.Zones {
			out += " " + z.Zone + "=" + z.State
		}
		return out
	}

	put(1)
	term := &rolloutTermRun{s: s}
	term.start()
	require.Eventually(t, func() bool { return states() == "Complete a=Done b=Done" }, 10*time.Second, 20*time.Millisecond, states)

	w.Spec.(*api.AppSpec).Template = tmpl("web:v2")
	put(2)
	require.Eventually(t, func() bool { return states() == "Progressing a=Updating b=Pending" }, 10*time.Second, 20*time.Millisecond, states)
	put(2, "a")
	require.Eventually(t, func() bool { return states() == "Progressing a=Done b=Updating" }, 10*time.Second, 20*time.Millisecond, states)
	// Events follow the write that holds them: wait for them, then for a
	// tick more, to see that none is published twice.
	events := func() string {
		started, _ := eventCount(t, b, w, api.EventRolloutZoneStarted)
		done, _ := eventCount(t, b, w, api.EventRolloutZoneDone)
		return fmt.Sprintf("%d zone-started, %d zone-done", started, done)
	}
	const wantEvents = "2 zone-started, 1 zone-done" // a, then b; a
	require.Eventually(t, func() bool { return events() == wantEvents }, 10*time.Second, 20*time.Millisecond, events)
	require.Never(t, func() bool { return events() != wantEvents }, 3*s.rolloutTick, s.rolloutTick/2, events)
	term.stop()

	// A write whose event was lost: the next term publishes it, once.
	r, rev := rollout()
	r.Phase, r.Message, r.Seq = api.RolloutPaused, "paused by a user", r.Seq+1
	r.Events = []api.RolloutEvent{{Event: api.EventRolloutPaused, Message: "paused by a user"}}
	r.Handled = time.Now().Add(time.Hour) // no operation to act on
	body, err := json.Marshal(r)
	require.NoError(t, err)
	kv, err := b.KV(ctx, bus.BucketRollouts)
	require.NoError(t, err)
	rev, err = kv.Update(ctx, key, body, rev)
	require.NoError(t, err)
	for range 2 {
		term = &rolloutTermRun{s: s}
		term.start()
		require.Eventually(t, func() bool {
			n, _ := eventCount(t, b, w, api.EventRolloutPaused)
			return n == 1
		}, 10*time.Second, 20*time.Millisecond, "the lost paused event")
		term.stop()
	}
	n, id := eventCount(t, b, w, api.EventRolloutPaused)
	assert.Equal(t, uint64(1), n)
	assert.Equal(t, bus.MsgID(key+"."+api.EventRolloutPaused, rev), id)
	assert.Equal(t, "Paused a=Done b=Updating", states(), "a paused rollout stays where it is")
}
