package remediation

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"atoll.dev/libs/disruption"
)

// step is one moment of a scenario: the clock advances by after, the
// node is observed as obs, and Step must return want and leave the
// phase; then the I/O outcome (if any) is applied.
type step struct {
	after time.Duration
	obs   Observation
	want  Action
	phase Phase
	// outcome applies what the I/O side did (nil: nothing).
	outcome func(s *NodeState, now time.Time)
}

var (
	healthy  = Observation{Present: true}
	notReady = Observation{Present: true, Unhealthy: true, Signal: "Ready=False"}
	unknown  = Observation{Present: true, Unhealthy: true, Signal: "Ready=Unknown"}
	gone     = Observation{}
)

func cordoned(o Observation) Observation { o.Cordoned, o.CordonedByUs = true, true; return o }

func testSteps() Steps {
	s := Steps{
		Conditions:    DefaultPolicy().Conditions,
		DrainAfter:    Duration(10 * time.Second),
		DrainRetry:    Duration(5 * time.Second),
		DrainRetryMax: Duration(20 * time.Second),
		DrainDeadline: Duration(time.Minute),
		DrainPolicy:   DrainStop,
	}
	s.Conditions[0].For = Duration(30 * time.Second)
	s.Default()
	return s
}

var flap = Flap{Transitions: 4, Window: 2 * time.Minute}

func started(s *NodeState, now time.Time) { s.Started(now, "") }
func drainedAll(s *NodeState, now time.Time) {
	s.Drained(now, disruption.DrainResult{}, testSteps())
}
func blocked(s *NodeState, now time.Time) {
	s.Drained(now, disruption.DrainResult{Blocked: []disruption.Blocked{{Pod: disruption.PodRef{Namespace: "p-demo", Name: "web-1"}, PDB: "p-demo/web"}}}, testSteps())
}
func replaced(s *NodeState, now time.Time) {
	s.Replace.Name, s.Replace.Done = "zone-a-general-r1", true
}

func TestStep(t *testing.T) {
	for _, tc := range []struct {
		name   string
		steps  Steps
		script []step
		events []string
	}{{
		name: "NotReady past its duration: cordon, drain, replace",
		script: []step{
			{0, notReady, ActNone, PhaseUnhealthy, nil},
			{29 * time.Second, notReady, ActNone, PhaseUnhealthy, nil},
			{time.Second, notReady, ActStart, PhaseUnhealthy, started},
			{time.Second, cordoned(notReady), ActNone, PhaseCordoned, nil},
			{10 * time.Second, cordoned(notReady), ActDrain, PhaseDraining, drainedAll},
			{0, cordoned(notReady), ActReplace, PhaseReplacing, replaced},
			{time.Second, gone, ActNone, PhaseReplacing, nil},
			{time.Second, Observation{ReplacementReady: true}, ActRelease, PhaseReplaced, nil},
			{ReplacedRetention, gone, ActForget, PhaseReplaced, nil},
		},
		events: []string{EvUnhealthy, EvCordoned, EvDraining, EvDrained, EvReplacing, EvReplaced},
	}, {
		name: "the clock starts when the service sees the condition, and again after the watch came back",
		script: []step{
			{0, notReady, ActNone, PhaseUnhealthy, nil},
			// The cluster was unreachable, then its watch came back 20s ago.
			{40 * time.Second, Observation{Present: true, Unhealthy: true, Signal: "Ready=False", WatchSince: time.Unix(0, 0).Add(20 * time.Second)}, ActNone, PhaseUnhealthy, nil},
			{10 * time.Second, Observation{Present: true, Unhealthy: true, Signal: "Ready=False", WatchSince: time.Unix(0, 0).Add(20 * time.Second)}, ActStart, PhaseUnhealthy, nil},
		},
		events: []string{EvUnhealthy},
	}, {
		name: "Unknown then False (a reboot) does not restart the clock",
		script: []step{
			{0, unknown, ActNone, PhaseUnhealthy, nil},
			{20 * time.Second, notReady, ActNone, PhaseUnhealthy, nil},
			{10 * time.Second, notReady, ActStart, PhaseUnhealthy, nil},
		},
		events: []string{EvUnhealthy},
	}, {
		name: "recovery mid-escalation stops it and uncordons",
		script: []step{
			{0, notReady, ActNone, PhaseUnhealthy, nil},
			{30 * time.Second, notReady, ActStart, PhaseUnhealthy, started},
			{5 * time.Second, cordoned(healthy), ActStop, PhaseHealthy, func(s *NodeState, now time.Time) { s.Stopped(now, true) }},
			{time.Second, healthy, ActNone, PhaseHealthy, nil},
		},
		events: []string{EvUnhealthy, EvCordoned, EvRecovered, EvUncordoned},
	}, {
		name: "a flapping node is never acted on, even unhealthy past the duration",
		script: []step{
			{0, notReady, ActNone, PhaseUnhealthy, nil},
			{5 * time.Second, healthy, ActNone, PhaseHealthy, nil},
			{5 * time.Second, notReady, ActNone, PhaseUnhealthy, nil},
			{5 * time.Second, healthy, ActNone, PhaseHealthy, nil},
			{5 * time.Second, notReady, ActNone, PhaseUnhealthy, nil}, // 5th change: flapping
			{40 * time.Second, notReady, ActNone, PhaseUnhealthy, nil},
			// The window passes without a change: no longer flapping.
			{2 * time.Minute, notReady, ActStart, PhaseUnhealthy, nil},
		},
		events: []string{EvUnhealthy, EvRecovered, EvUnhealthy, EvRecovered, EvFlapping, EvUnhealthy},
	}, {
		name: "a node a human cordoned is left alone",
		script: []step{
			{0, Observation{Present: true, Unhealthy: true, Signal: "Ready=False", Cordoned: true}, ActNone, PhaseUnhealthy, nil},
			{time.Hour, Observation{Present: true, Unhealthy: true, Signal: "Ready=False", Cordoned: true}, ActNone, PhaseUnhealthy, nil},
		},
		events: []string{EvUnhealthy},
	}, {
		name: "a PDB blocking forever: backoff, then the deadline and the stop policy",
		script: []step{
			{0, notReady, ActNone, PhaseUnhealthy, nil},
			{30 * time.Second, notReady, ActStart, PhaseUnhealthy, started},
			{10 * time.Second, cordoned(notReady), ActDrain, PhaseDraining, blocked},
			{4 * time.Second, cordoned(notReady), ActNone, PhaseDraining, nil},  // first retry after 5s
			{time.Second, cordoned(notReady), ActDrain, PhaseDraining, blocked}, // then 10s
			{9 * time.Second, cordoned(notReady), ActNone, PhaseDraining, nil},  //
			{time.Second, cordoned(notReady), ActDrain, PhaseDraining, blocked}, // then 20s (max)
			{20 * time.Second, cordoned(notReady), ActDrain, PhaseDraining, blocked},
			{25 * time.Second, cordoned(notReady), ActNone, PhaseNeedsHuman, nil}, // 60s since the drain began: its deadline
			{time.Hour, cordoned(notReady), ActNone, PhaseNeedsHuman, nil},
		},
		events: []string{EvUnhealthy, EvCordoned, EvDraining, EvDrainBlocked, EvDrainDeadline, EvNeedsHuman},
	}, {
		name:  "a PDB blocking forever under the force policy",
		steps: func() Steps { s := testSteps(); s.DrainPolicy = DrainForce; return s }(),
		script: []step{
			{0, notReady, ActNone, PhaseUnhealthy, nil},
			{30 * time.Second, notReady, ActStart, PhaseUnhealthy, started},
			{10 * time.Second, cordoned(notReady), ActDrain, PhaseDraining, blocked},
			{time.Minute, cordoned(notReady), ActDrain, PhaseDraining, func(s *NodeState, now time.Time) {
				require.True(t, s.Drain.Force)
				drainedAll(s, now)
			}},
			{0, cordoned(notReady), ActReplace, PhaseReplacing, nil},
		},
		events: []string{EvUnhealthy, EvCordoned, EvDraining, EvDrainBlocked, EvDrainDeadline, EvDrained, EvReplacing},
	}, {
		name: "a replacement that never becomes Ready: bounded retries, then a human",
		script: []step{
			{0, notReady, ActNone, PhaseUnhealthy, nil},
			{30 * time.Second, notReady, ActStart, PhaseUnhealthy, started},
			{10 * time.Second, cordoned(notReady), ActDrain, PhaseDraining, drainedAll},
			{0, cordoned(notReady), ActReplace, PhaseReplacing, replaced},
			{time.Second, gone, ActNone, PhaseReplacing, nil},
			{10 * time.Minute, gone, ActRetryReplace, PhaseReplacing, func(s *NodeState, now time.Time) { s.NextReplacement(now); replaced(s, now) }},
			{10 * time.Minute, gone, ActRetryReplace, PhaseReplacing, func(s *NodeState, now time.Time) { s.NextReplacement(now); replaced(s, now) }},
			{10 * time.Minute, gone, ActRelease, PhaseNeedsHuman, nil},
		},
		events: []string{EvUnhealthy, EvCordoned, EvDraining, EvDrained, EvReplacing,
			EvReplacementFailed, EvReplacing, EvReplacementFailed, EvReplacing, EvReplacementFailed, EvNeedsHuman},
	}, {
		name: "a node deleted mid-drain is forgotten",
		script: []step{
			{0, notReady, ActNone, PhaseUnhealthy, nil},
			{30 * time.Second, notReady, ActStart, PhaseUnhealthy, started},
			{10 * time.Second, cordoned(notReady), ActDrain, PhaseDraining, blocked},
			{time.Second, gone, ActForget, PhaseDraining, nil},
		},
		events: []string{EvUnhealthy, EvCordoned, EvDraining, EvDrainBlocked, EvGone},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(time.Unix(0, 0))
			st := tc.steps
			if st.Conditions == nil {
				st = testSteps()
			}
			s := &NodeState{Node: "n", UID: "u", Phase: PhaseHealthy}
			for i, sp := range tc.script {
				clk.SetTime(clk.Now().Add(sp.after))
				got := Step(s, sp.obs, clk.Now(), st, flap)
				require.Equal(t, sp.want, got, "step %d action (waiting %q)", i, s.Waiting)
				require.Equal(t, sp.phase, s.Phase, "step %d phase", i)
				if sp.outcome != nil {
					sp.outcome(s, clk.Now())
				}
			}
			var events []string
			for _, e := range s.History {
				events = append(events, e.Event)
			}
			require.Equal(t, tc.events, events)
		})
	}
}

func TestNeedsHumanNamesTheBlockingPDB(t *testing.T) {
	st := testSteps()
	now := time.Unix(0, 0)
	s := &NodeState{Phase: PhaseHealthy}
	Step(s, notReady, now, st, flap)
	now = now.Add(30 * time.Second)
	require.Equal(t, ActStart, Step(s, notReady, now, st, flap))
	s.Started(now, "")
	now = now.Add(10 * time.Second)
	require.Equal(t, ActDrain, Step(s, cordoned(notReady), now, st, flap))
	blocked(s, now)
	now = now.Add(2 * time.Minute)
	Step(s, cordoned(notReady), now, st, flap)
	require.Equal(t, PhaseNeedsHuman, s.Phase)
	last := s.History[len(s.History)-1]
	require.Equal(t, EvNeedsHuman, last.Event)
	require.Contains(t, last.Message, "PodDisruptionBudget p-demo/web")
}
