package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/services/scheduler/framework"
	"atoll.dev/services/scheduler/plugins/fit"
)

// Tiers in the service.
//
// Queues. The work and replay queues hand out keys by tier (Reserved,
// then OnDemand, then Preemptible), then by priority (higher first), then
// by admission time, then by key (sortKey): a burst of Preemptible
// submissions queues behind a Reserved one that arrives later, and the
// workers, which decide one at a time, take turns in that order too
// (decideLock). An unschedulable decision records its tier queue and its
// position among the workloads of that tier waiting when it was made;
// when a workload is deleted, the waiting ones are looked at again at
// once, in that order.
//
// Preemption. A Reserved or OnDemand workload whose candidates have room
// for fewer than all its pods preempts (PlanPreemption) among the placed
// Preemptible workloads the term indexes, at most Options.PreemptionsPerSecond
// rounds a second. Each victim's placement is replaced by an
// unschedulable one naming the preemptor (PreemptedBy), so the propagator
// removes its objects (graceful termination is the member cluster's);
// a `preempted` event names the preemptor; the room it held is counted
// free until the inventory no longer counts it (term.release); and it
// waits in the Preemptible queue, retried like any unschedulable
// workload, until capacity returns: never lost, never resubmitted. A
// victim is Preemptible and Preemptible work never preempts, so
// preemption never cascades. Preemption happens when a decision is made:
// a workload placed with fewer pods' room than it has (the rest wait in
// the member clusters) does not preempt later, until its next decision.

// Options configure the scheduler's tiers; set them before Start.
type Options struct {
	framework.Options
	// PreemptionsPerSecond bounds the preemption rounds (one preemptor's
	// victims) a second, with a burst of as many (0:
	// DefaultPreemptionsPerSecond).
	PreemptionsPerSecond float64
	// AssumeGrace keeps what a decision placed counted as requested until
	// an inventory computed this long after the decision, not merely
	// after it: an inventory computed between a decision and the binding
	// of its pods does not count them yet (0: the first later inventory
	// ends the assumption). Room released by a preemption ends with the
	// first later inventory in any case.
	AssumeGrace time.Duration
	// AnnounceWindow is how recent a placement must be, against the newest
	// in the bucket when a term starts, for the term's replay to ensure
	// its events at once (0: DefaultAnnounceWindow); an older placement's
	// events were ensured by the term that wrote it or one since, and are
	// ensured again at AnnounceRate.
	AnnounceWindow time.Duration
	// AnnounceRate bounds the ensures of older placements' events a
	// second (0: bus.ResyncRate).
	AnnounceRate float64
}

// Environment variables that set Options (the platform configuration of
// tiers) for the scheduler's daemon and `atoll-dev`.
const (
	EnvBufferPercent         = "ATOLL_SCHEDULER_BUFFER_PERCENT"
	EnvPreemptibleOnReserved = "ATOLL_SCHEDULER_PREEMPTIBLE_ON_RESERVED"
	EnvPreemptionsPerSecond  = "ATOLL_SCHEDULER_PREEMPTIONS_PER_SECOND"
	EnvAssumeGrace           = "ATOLL_SCHEDULER_ASSUME_GRACE"
)

// OptionsFromEnv reads Options from the environment (getenv); a value it
// cannot read is logged and left at its default.
func OptionsFromEnv(getenv func(string) string, log *slog.Logger) Options {
	var o Options
	if v := getenv(EnvBufferPercent); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 && n <= 100 {
			o.BufferPercent = n
		} else {
			log.Warn("ignoring the buffer share: want 0 to 100", "env", EnvBufferPercent, "value", v)
		}
	}
	if v := getenv(EnvPreemptibleOnReserved); v != "" {
		if b, err := strconv.ParseBool(v); err == nil {
			o.PreemptibleOnReserved = b
		} else {
			log.Warn("ignoring a value that is not a boolean", "env", EnvPreemptibleOnReserved, "value", v)
		}
	}
	if v := getenv(EnvPreemptionsPerSecond); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 {
			o.PreemptionsPerSecond = f
		} else {
			log.Warn("ignoring a rate that is not positive", "env", EnvPreemptionsPerSecond, "value", v)
		}
	}
	if v := getenv(EnvAssumeGrace); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d >= 0 {
			o.AssumeGrace = d
		} else {
			log.Warn("ignoring a grace that is not a duration", "env", EnvAssumeGrace, "value", v)
		}
	}
	return o
}

// DefaultPreemptionsPerSecond is the default bound on preemption rounds.
const DefaultPreemptionsPerSecond = 5

// DefaultAnnounceWindow is the default Options.AnnounceWindow: as long as
// admission's repair looks back for workloads it may have left unsent.
const DefaultAnnounceWindow = 2 * time.Minute

func (o Options) announceWindow() time.Duration {
	if o.AnnounceWindow > 0 {
		return o.AnnounceWindow
	}
	return DefaultAnnounceWindow
}

func (o Options) announceRate() float64 {
	if o.AnnounceRate > 0 {
		return o.AnnounceRate
	}
	return bus.ResyncRate
}

// FilterPreemption names a victim's reason for waiting.
const FilterPreemption = "Preemption"

// tierState is the service's state for tiers beyond a term.
type tierState struct {
	once    sync.Once
	limiter *rate.Limiter

	mu    sync.Mutex
	ranks map[string]rankEntry // mu must be held: sort keys by workload key, per revision
}

type rankEntry struct {
	rev  uint64
	sort string
}

// rankDoc is what ordering needs of a workload document.
type rankDoc struct {
	Metadata struct {
		Created time.Time `json:"created"`
	} `json:"metadata"`
	Spec struct {
		Tier     api.Tier `json:"tier"`
		Priority int32    `json:"priority"`
	} `json:"spec"`
}

// SortKey orders work: tier, then priority (higher first), then
// admission time, then key.
func SortKey(tier api.Tier, priority int32, admitted time.Time, key string) string {
	return fmt.Sprintf("%d%05d%020d%s", api.TierRank(tier), api.MaxPriority-min(max(priority, api.MinPriority), api.MaxPriority), max(admitted.UnixNano(), 0), key)
}

// sortKey is the queues' order of key: a deleted workload first (its
// placement goes), then by SortKey. It decodes only the fields it needs,
// once per revision.
func (s *Service) sortKey(key string) string {
	e, ok := s.workloadM.Get(key)
	if !ok {
		return ""
	}
	s.tiers.mu.Lock()
	defer s.tiers.mu.Unlock()
	if s.tiers.ranks == nil {
		s.tiers.ranks = map[string]rankEntry{}
	}
	if r, ok := s.tiers.ranks[key]; ok && r.rev == e.Revision {
		return r.sort
	}
	var d rankDoc
	_ = json.Unmarshal(e.Value, &d) // undecodable: OnDemand, priority 0; the reconcile logs it
	r := rankEntry{rev: e.Revision, sort: SortKey(d.Spec.Tier, d.Spec.Priority, d.Metadata.Created, key)}
	s.tiers.ranks[key] = r
	return r.sort
}

func (s *Service) forgetRank(key string) {
	s.tiers.mu.Lock()
	defer s.tiers.mu.Unlock()
	delete(s.tiers.ranks, key)
}

func (s *Service) limiter() *rate.Limiter {
	s.tiers.once.Do(func() {
		r := s.Options.PreemptionsPerSecond
		if r <= 0 {
			r = DefaultPreemptionsPerSecond
		}
		s.tiers.limiter = rate.NewLimiter(rate.Limit(r), max(int(r), 1))
	})
	return s.tiers.limiter
}

// decideOrPreempt places w on the term's snapshot, preempting for it when it is
// Reserved or OnDemand and short of room. t.decide must be held. retry
// is how soon to look again without writing (preemption was needed but
// its rate bound was reached), or 0.
func (s *Service) decideOrPreempt(ctx context.Context, t *term, w *api.Workload, prev *api.PlacementDecision) (d api.PlacementDecision, retry time.Duration, err error) {
	now := time.Now().UTC()
	out := s.kinds.decide(w, s.snapshot(t), now, s.Options.Options)
	if out.Workload != nil && out.Workload.Tier != api.TierPreemptible && out.Room < out.Pods {
		preempted, wait, err := s.preempt(ctx, t, w, out)
		if err != nil {
			return d, 0, err
		}
		if wait > 0 {
			return d, wait, nil
		}
		if preempted {
			out = s.kinds.decide(w, s.snapshot(t), now, s.Options.Options)
		}
	}
	d = out.Decision
	if d.Unschedulable {
		tier, _ := w.Spec.Scheduling()
		d.Queue = string(tier)
		d.Position = t.queuePosition(w.Key(), s.sortKey(w.Key()))
		if prev != nil && prev.Generation == d.Generation && prev.PreemptedBy != "" {
			d.PreemptedBy = prev.PreemptedBy
		}
	} else {
		t.queuePosition(w.Key(), "")
	}
	return d, 0, nil
}

// preempt plans and carries out the preemption a short workload needs:
// it reports whether it took any placement back.
func (s *Service) preempt(ctx context.Context, t *term, w *api.Workload, out Outcome) (bool, time.Duration, error) {
	fw := out.Workload
	snap := s.snapshot(t)
	classes := map[string]bool{}
	var clusters []PreemptionCluster
	for _, c := range snap {
		if !passesAllBut(fw, c, fit.Name) {
			continue
		}
		capacity := framework.CapacityFor(fw, c)
		free, pods := capacity.Free()
		// What the decision already counted as room is not the victims' to give.
		room := capacity.PodsThatFit(fw.PerPod)
		free = addQ(free, api.Quantities{MilliCPU: -room * fw.PerPod.MilliCPU, MemoryBytes: -room * fw.PerPod.MemoryBytes, GPUs: -room * fw.PerPod.GPUs})
		classes[c.Name] = framework.PoolClass(fw.Tier, c)
		clusters = append(clusters, PreemptionCluster{Name: c.Name, Free: free, FreePods: pods - room})
	}
	if len(clusters) == 0 {
		return false, 0, nil
	}
	byCluster := t.victims(func(name string) (bool, bool) { r, ok := classes[name]; return r, ok })
	for i := range clusters {
		clusters[i].Victims = byCluster[clusters[i].Name]
	}
	plan := PlanPreemption(out.Pods-out.Room, fw.PerPod, clusters)
	if plan.Pods == 0 {
		return false, 0, nil
	}
	if r := s.limiter().Reserve(); !r.OK() || r.Delay() > 0 {
		d := r.Delay()
		r.Cancel()
		return false, max(d, 100*time.Millisecond), nil
	}
	key := w.Key()
	for _, step := range plan.Steps {
		for _, v := range step.Victims {
			if err := s.evict(ctx, t, v.Key, key, fw.Tier, step.Cluster); err != nil {
				return true, 0, err
			}
		}
	}
	s.log.Info("preempted", "preemptor", key, "tier", fw.Tier, "victims", plan.VictimKeys(), "pods", plan.Pods)
	return true, 0, nil
}

// passesAllBut says whether c passes every filter but the one named.
func passesAllBut(fw *framework.Workload, c *api.ClusterInfo, skip string) bool {
	for _, f := range filters {
		if f.Name() != skip && f.Filter(fw, c) != "" {
			return false
		}
	}
	return true
}

// evict takes a victim's placement back for preemptor: an unschedulable
// placement naming it (the propagator removes the victim's objects), the
// room counted free, a `preempted` event, and a retry in a while.
func (s *Service) evict(ctx context.Context, t *term, victim, preemptor string, tier api.Tier, cluster string) error {
	vw, ok, err := s.workload(victim)
	if !ok || err != nil {
		return nil
	}
	now := time.Now().UTC()
	reason := fmt.Sprintf("preempted by %s (%s) to make room on %s", preemptor, tier, cluster)
	var rev uint64
	for {
		pe, err := s.placements.Get(ctx, victim)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read placement of victim %s: %w", victim, err)
		}
		var cur api.PlacementDecision
		if json.Unmarshal(pe.Value(), &cur) != nil || len(cur.Shards) == 0 {
			t.release(victim, now) // already taken back
			return nil
		}
		d := api.PlacementDecision{
			Key: victim, Generation: cur.Generation, Decided: now, Unschedulable: true,
			Reasons:     []api.Rejection{{Cluster: cluster, Filter: FilterPreemption, Reason: reason}},
			Queue:       string(api.TierPreemptible),
			Position:    t.queuePosition(victim, s.sortKey(victim)),
			PreemptedBy: preemptor,
		}
		b, err := json.Marshal(&d)
		if err != nil {
			return err
		}
		rev, err = bus.CompareAndSet(ctx, s.placements, victim, b, pe.Revision())
		if errors.Is(err, bus.ErrConflict) {
			continue
		}
		if err != nil {
			return fmt.Errorf("take back placement of %s: %w", victim, err)
		}
		break
	}
	t.release(victim, now)
	t.work.AddAfter(victim, RetryUnschedulable)
	if err := s.events.Ensure(ctx, vw, api.EventPreempted, reason, rev); err != nil {
		return fmt.Errorf("announce preemption of %s: %w", victim, err)
	}
	t.announced(victim, rev) // its placement's event is the preemption
	return nil
}
