package plan

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRounding(t *testing.T) {
	for _, tc := range []struct {
		limit       string
		total       int
		unavailable int
		surge       int
	}{
		{"1", 3, 1, 1},
		{"2", 1, 1, 1}, // capped by the pool
		{"0", 5, 0, 0},
		{"", 5, 0, 0},
		{"25%", 4, 1, 1},
		{"25%", 6, 1, 2}, // 1.5: down for unavailable, up for surge
		{"10%", 3, 1, 1}, // 0.3: at least one unavailable; surge rounds up
		{"40%", 6, 2, 3}, // 2.4
		{"50%", 5, 2, 3}, // 2.5
		{"100%", 4, 4, 4},
		{"0%", 4, 0, 0},
	} {
		t.Run(fmt.Sprintf("%s of %d", tc.limit, tc.total), func(t *testing.T) {
			u, err := MaxUnavailable(tc.limit, tc.total)
			require.NoError(t, err)
			require.Equal(t, tc.unavailable, u, "unavailable")
			s, err := MaxSurge(tc.limit, tc.total)
			require.NoError(t, err)
			require.Equal(t, tc.surge, s, "surge")
		})
	}
	for _, bad := range []string{"-1", "101%", "x", "1.5"} {
		_, err := MaxUnavailable(bad, 3)
		require.Error(t, err, bad)
	}
}

func TestWaveOf(t *testing.T) {
	nodes := func(n int) []PoolNode {
		var out []PoolNode
		for i := range n {
			out = append(out, PoolNode{UID: fmt.Sprint("u", i), Name: fmt.Sprintf("n%d", i), Ready: true})
		}
		return out
	}
	for _, tc := range []struct {
		name        string
		ps          PoolStep
		total       int
		todo        []PoolNode
		want, surge int
	}{
		{"one unavailable", PoolStep{MaxUnavailable: "1"}, 4, nodes(4), 1, 0},
		{"surge and unavailable", PoolStep{MaxUnavailable: "1", MaxSurge: "1"}, 4, nodes(4), 2, 1},
		{"percent", PoolStep{MaxUnavailable: "50%", MaxSurge: "25%"}, 6, nodes(6), 5, 2},
		{"fewer left than a wave", PoolStep{MaxUnavailable: "3"}, 6, nodes(2), 2, 0},
		{"a pool of one is surged", PoolStep{MaxUnavailable: "1"}, 1, nodes(1), 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := WaveOf(tc.ps, tc.total, tc.todo)
			require.Len(t, w, tc.want)
			surged := 0
			for _, m := range w {
				if m.Surge {
					surged++
				}
			}
			require.Equal(t, tc.surge, surged)
		})
	}
	// NotReady nodes go first: they are unavailable already.
	todo := nodes(3)
	todo[2].Ready = false
	require.Equal(t, "n2", WaveOf(PoolStep{MaxUnavailable: "1"}, 3, todo)[0].Name)
}

func TestWindows(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		return v
	}
	paris := Window{Days: []string{"Sat", "Sun"}, Start: "02:00", End: "05:00", TimeZone: "Europe/Paris"}
	night := Window{Days: []string{"Fri"}, Start: "22:00", End: "02:00", TimeZone: "America/New_York"}
	for _, tc := range []struct {
		name string
		w    Window
		t    string
		in   bool
	}{
		{"inside in Paris (UTC+1 in winter)", paris, "2026-11-21T01:30:00Z", true},           // Sat 02:30 Paris
		{"before the start in Paris", paris, "2026-11-21T00:30:00Z", false},                  // Sat 01:30 Paris
		{"end is exclusive", paris, "2026-11-21T04:00:00Z", false},                           // Sat 05:00 Paris
		{"wrong day", paris, "2026-11-20T01:30:00Z", false},                                  // Fri 02:30 Paris
		{"summer time shifts the UTC hours", paris, "2026-07-04T00:30:00Z", true},            // Sat 02:30 CEST
		{"overnight, evening part", night, "2026-11-21T03:30:00Z", true},                     // Fri 22:30 NY
		{"overnight, after midnight belongs to Friday", night, "2026-11-21T06:30:00Z", true}, // Sat 01:30 NY
		{"overnight, after midnight of Saturday", night, "2026-11-22T06:30:00Z", false},      // Sun 01:30 NY
		{"overnight, after the end", night, "2026-11-21T07:30:00Z", false},                   // Sat 02:30 NY
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.in, tc.w.Contains(at(tc.t)))
		})
	}
	require.True(t, InWindow(nil, at("2026-11-21T04:00:00Z")), "no windows: always")
	require.Error(t, Window{Start: "2:00", End: "03:00"}.Validate())
	require.Error(t, Window{Start: "02:00", End: "03:00", TimeZone: "Mars/Olympus"}.Validate())
}

func TestValidate(t *testing.T) {
	s := Spec{Name: "v2", Target: Target{Label: "atoll.dev/version", Value: "v2"},
		Clusters:    []ClusterStep{{Name: "a", Pools: []PoolStep{{Name: "general", MaxUnavailable: "0", MaxSurge: "0"}}}},
		DrainPolicy: "later"}
	err := s.Validate()
	require.ErrorContains(t, err, "clusters[0].pools[0]: maxUnavailable and maxSurge cannot both be 0")
	require.ErrorContains(t, err, "drainPolicy")
	s.Clusters[0].Pools[0] = PoolStep{Name: "general"}
	s.DrainPolicy = ""
	s.Default()
	require.NoError(t, s.Validate())
	require.Equal(t, "1", s.Clusters[0].Pools[0].MaxUnavailable)
}

var t0 = time.Date(2026, 11, 21, 1, 0, 0, 0, time.UTC)

func spec() *Spec {
	s := &Spec{Name: "v2", Target: Target{Label: "atoll.dev/version", Value: "v2"},
		Clusters: []ClusterStep{
			{Name: "canary", Pools: []PoolStep{{Name: "p", MaxUnavailable: "1"}}},
			{Name: "b", Pools: []PoolStep{{Name: "p", MaxUnavailable: "50%", MaxSurge: "1"}, {Name: "q", MaxUnavailable: "1"}}},
		},
		Soak: Duration{Duration: time.Minute}, DrainDeadline: Duration{Duration: 5 * time.Minute}}
	s.Default()
	return s
}

func TestStep(t *testing.T) {
	s := spec()
	for _, tc := range []struct {
		name     string
		node     Node
		obs      Observed
		rollback bool
		now      time.Time
		state    NodeState
		act      Action
	}{
		{"leased, no surge: cordon", Node{State: NodeLeased}, Observed{Exists: true}, false, t0, NodeCordoned, ActCordon},
		{"leased, human cordoned: not cordoned again", Node{State: NodeLeased}, Observed{Exists: true, Unschedulable: true}, false, t0, NodeCordoned, ActNone},
		{"leased, surge: replacement first", Node{State: NodeLeased, Surge: true}, Observed{Exists: true}, false, t0, NodeSurging, ActSurge},
		{"surging, replacement not ready", Node{State: NodeSurging, Surge: true, Since: t0}, Observed{Exists: true}, false, t0.Add(time.Minute), NodeSurging, ActSurge},
		{"surging, replacement ready: cordon", Node{State: NodeSurging, Surge: true}, Observed{Exists: true, ReplacementReady: true}, false, t0, NodeCordoned, ActCordon},
		{"resumed after crash before the cordon call", Node{State: NodeCordoned, Cordoned: true}, Observed{Exists: true}, false, t0, NodeCordoned, ActCordon},
		{"resumed cordoned: drain, no second cordon", Node{State: NodeCordoned, Cordoned: true}, Observed{Exists: true, Unschedulable: true}, false, t0, NodeDraining, ActDrain},
		{"draining within deadline", Node{State: NodeDraining, DrainStarted: t0}, Observed{Exists: true, Unschedulable: true}, false, t0.Add(time.Minute), NodeDraining, ActDrain},
		{"drained: replace", Node{State: NodeDraining, DrainStarted: t0}, Observed{Exists: true, Unschedulable: true, Drained: true}, false, t0, NodeReplaced, ActReplace},
		{"deadline, policy pause", Node{State: NodeDraining, DrainStarted: t0, Blocked: "ns/web"}, Observed{Exists: true, Unschedulable: true}, false, t0.Add(6 * time.Minute), NodeDraining, ActPause},
		{"replaced, old still there: replace again (idempotent)", Node{State: NodeReplaced}, Observed{Exists: true}, false, t0, NodeReplaced, ActReplace},
		{"replaced, waiting for workloads", Node{State: NodeReplaced, Since: t0}, Observed{ReplacementReady: true}, false, t0, NodeReplaced, ActNone},
		{"replaced, all back: done", Node{State: NodeReplaced}, Observed{ReplacementReady: true, WorkloadsAvailable: true}, false, t0, NodeDone, ActRelease},
		{"replacement never ready: pause", Node{State: NodeReplaced, Since: t0}, Observed{}, false, t0.Add(11 * time.Minute), NodeReplaced, ActPause},
		{"rollback of a cordoned node: uncordon", Node{State: NodeDraining, Cordoned: true}, Observed{Exists: true, Unschedulable: true}, true, t0, NodeRolled, ActUncordon},
		{"rollback never uncordons a human's cordon", Node{State: NodeCordoned}, Observed{Exists: true, Unschedulable: true}, true, t0, NodeRolled, ActRelease},
		{"rollback takes back a cordon that may land late", Node{State: NodeCordoned, Cordoned: true}, Observed{Exists: true}, true, t0, NodeRolled, ActUncordon},
		{"rollback leaves a drained node to finish", Node{State: NodeReplaced}, Observed{Exists: true}, true, t0, NodeReplaced, ActReplace},
		{"node deleted under us", Node{State: NodeCordoned}, Observed{}, false, t0, NodeGone, ActRelease},
		{"pending: nothing", Node{State: NodePending}, Observed{Exists: true}, false, t0, NodePending, ActNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, act := Step(s, tc.node, tc.obs, tc.rollback, tc.now)
			require.Equal(t, tc.state, n.State)
			require.Equal(t, tc.act, act)
		})
	}
	t.Run("deadline policies", func(t *testing.T) {
		n := Node{State: NodeDraining, DrainStarted: t0, Cordoned: true, Blocked: "ns/db"}
		o := Observed{Exists: true, Unschedulable: true}
		late := t0.Add(6 * time.Minute)
		sk := *s
		sk.DrainPolicy = DrainSkip
		m, act := Step(&sk, n, o, false, late)
		require.Equal(t, NodeSkipped, m.State)
		require.Equal(t, ActUncordon, act)
		require.Contains(t, m.Why, "ns/db")
		fo := *s
		fo.DrainPolicy = DrainForce
		m, act = Step(&fo, n, o, false, late)
		require.True(t, m.Forced)
		require.Equal(t, ActForce, act)
		m, act = Step(&fo, m, o, false, late.Add(time.Second))
		require.Equal(t, ActForce, act, "a forced drain stays forced")
		m, act = Step(s, n, o, false, late)
		require.Equal(t, ActPause, act)
		require.Equal(t, late, m.DrainStarted, "a resumed plan gives the node another deadline")
	})
}

// fake is a member-cluster fleet for the simulation: nodes by UID.
type fake struct {
	nodes     map[string]*fnode
	cordons   map[string]int // cordon calls by UID
	evictions int
	maxOut    map[string]int // most unavailable at once by cluster/pool
	order     []string       // clusters in the order a node was first cordoned
	uid       int
	blockOn   string         // node name whose drain never finishes
	size      map[string]int // nodes per cluster/pool at the start
	kv        []byte         // the stored progress
	now       time.Time
}

type fnode struct {
	uid, name, cluster, pool, version string
	unsched, ready                    bool
	pods                              int
}

func newFake(s *Spec, perPool int) *fake {
	f := &fake{nodes: map[string]*fnode{}, cordons: map[string]int{}, maxOut: map[string]int{}, size: map[string]int{}, now: t0}
	for _, c := range s.Clusters {
		for _, p := range c.Pools {
			for i := range perPool {
				f.add(c.Name, p.Name, fmt.Sprintf("%s-%s-%d", c.Name, p.Name, i), "v1")
				f.size[c.Name+"/"+p.Name]++
			}
		}
	}
	return f
}

func (f *fake) add(cluster, pool, name, version string) *fnode {
	f.uid++
	n := &fnode{uid: fmt.Sprint("uid-", f.uid), name: name, cluster: cluster, pool: pool, version: version, ready: true, pods: 2}
	f.nodes[n.uid] = n
	return n
}

func (f *fake) byName(name string) *fnode {
	for _, n := range f.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

func (f *fake) pool(cluster, pool string) []PoolNode {
	var out []PoolNode
	for _, n := range f.nodes {
		if n.cluster == cluster && n.pool == pool {
			out = append(out, PoolNode{UID: n.uid, Name: n.name, Version: n.version, Ready: n.ready})
		}
	}
	return out
}

func (f *fake) observe(n *Node) Observed {
	fn := f.nodes[n.UID]
	o := Observed{WorkloadsAvailable: true}
	if fn != nil {
		o.Exists, o.Unschedulable, o.Drained = true, fn.unsched, fn.pods == 0
	}
	if r := f.byName(n.Replacement); r != nil {
		o.ReplacementReady = r.ready
	}
	return o
}

// sample records each pool's shortfall: its starting size less its
// Ready, schedulable nodes (a surged replacement makes up for the node it
// replaces).
func (f *fake) sample() {
	up := map[string]int{}
	for _, n := range f.nodes {
		if !n.unsched && n.ready {
			up[n.cluster+"/"+n.pool]++
		}
	}
	for k, size := range f.size {
		f.maxOut[k] = max(f.maxOut[k], size-up[k])
	}
}

func (f *fake) act(s *Spec, n *Node, act Action) {
	fn := f.nodes[n.UID]
	switch act {
	case ActSurge, ActReplace:
		if n.Replacement == "" {
			n.Replacement = n.Name + "-new"
		}
		if f.byName(n.Replacement) == nil {
			f.add(n.Cluster, n.Pool, n.Replacement, s.Target.Value)
		}
		if act == ActReplace {
			delete(f.nodes, n.UID)
		}
	case ActCordon:
		if fn.unsched {
			panic("cordon of a cordoned node")
		}
		f.cordons[n.UID]++
		fn.unsched = true
		if !slices.Contains(f.order, n.Cluster) {
			f.order = append(f.order, n.Cluster)
		}
	case ActUncordon:
		fn.unsched = false
	case ActDrain, ActForce:
		if fn.name == f.blockOn && act == ActDrain {
			n.Blocked = "ns/blocker"
			return
		}
		if fn.pods > 0 {
			fn.pods--
			f.evictions++
		}
	}
}

// run drives the plan to a fixed point the way the service does, storing
// (JSON round trip into f.kv, as in the KV) before every side effect and
// reloading it every tick, as a new term would.
func run(t *testing.T, s *Spec, f *fake, ctl *Control, ticks int) Progress {
	store := func(p Progress) {
		b, err := json.Marshal(p)
		require.NoError(t, err)
		f.kv = b
	}
	load := func() Progress {
		var p Progress
		if f.kv != nil {
			require.NoError(t, json.Unmarshal(f.kv, &p))
		}
		return p
	}
	for range ticks {
		f.now = f.now.Add(10 * time.Second)
		now := f.now
		p := load()
		c, pl := p.CurrentCluster(s), ""
		if c != "" {
			pl = s.Clusters[p.Cluster].Pools[p.Pool].Name
		}
		next, start, _ := Advance(s, p, *ctl, f.pool(c, pl), Gate{}, now)
		for _, n := range start {
			n.State, n.Since = NodeLeased, now // the lease is granted
		}
		store(next)
		rb := Rollback(s, next)
		for _, uid := range slices.Sorted(maps.Keys(next.Nodes)) {
			n := next.Nodes[uid]
			m, act := Step(s, *n, f.observe(n), rb, now)
			if act == ActPause {
				Pause(&next, ByNode, m.Why, *ctl)
			}
			next.Nodes[uid] = &m
			if (act == ActSurge || act == ActReplace) && m.Replacement == "" {
				m.Replacement = m.Name + "-new" // recorded before the call
			}
			store(next)
			f.act(s, &m, act)
			store(next) // what the pass found (Blocked, ...)
			f.sample()
		}
		if next.Phase == PhaseDone || next.Phase == PhaseAborted {
			return next
		}
	}
	return load()
}

func TestPlanRotatesEverythingCanaryFirst(t *testing.T) {
	s := spec()
	f := newFake(s, 4)
	p := run(t, s, f, &Control{}, 400)
	require.Equal(t, PhaseDone, p.Phase, p.Reason)
	for _, n := range f.nodes {
		require.Equal(t, "v2", n.version, n.name)
		require.False(t, n.unsched, n.name)
	}
	require.Len(t, f.nodes, 12, "every node replaced one for one")
	require.Equal(t, []string{"canary", "b"}, f.order, "canary first")
	require.Equal(t, []string{"canary", "b"}, p.Touched)
	for uid, c := range f.cordons {
		require.Equal(t, 1, c, uid)
	}
	require.LessOrEqual(t, f.maxOut["canary/p"], 1)
	require.LessOrEqual(t, f.maxOut["b/p"], 2, "50% of 4")
	require.Positive(t, f.maxOut["b/p"], "sampled")
	require.LessOrEqual(t, f.maxOut["b/q"], 1)
	require.Equal(t, 12*2, f.evictions, "each pod evicted once")
}

func TestResumeFromStoredProgress(t *testing.T) {
	s := spec()
	f := newFake(s, 4)
	// A leader dies mid-wave: the same stored progress is picked up by a
	// standby (run reloads it every tick; here the term changes at tick 3,
	// with a node cordoned and mid-drain).
	ctl := &Control{}
	p := run(t, s, f, ctl, 3)
	require.NotEmpty(t, p.InFlight())
	var cordoned, draining int
	for _, n := range p.InFlight() {
		if n.State == NodeCordoned {
			cordoned++
		}
		if n.State == NodeDraining {
			draining++
		}
	}
	require.Positive(t, cordoned+draining)
	p = run(t, s, f, ctl, 400)
	require.Equal(t, PhaseDone, p.Phase)
	require.Equal(t, 12*2, f.evictions, "no double eviction")
	for _, n := range f.nodes {
		require.False(t, n.unsched, n.name)
	}
	for uid, c := range f.cordons {
		require.Equal(t, 1, c, uid)
	}
}

func TestPauseHonouredAndFinishOrStop(t *testing.T) {
	s := spec()
	f := newFake(s, 4)
	ctl := &Control{Pause: true, Reason: "given while the service was down"}
	p := run(t, s, f, ctl, 50)
	require.Equal(t, PhasePaused, p.Phase)
	require.Contains(t, p.Reason, "while the service was down")
	require.Empty(t, f.cordons, "nothing starts while paused")
	ctl.Pause, ctl.ResumeSeq = false, 1
	p = run(t, s, f, ctl, 400)
	require.Equal(t, PhaseDone, p.Phase)

	// Windows: a wave never starts outside; started nodes finish.
	s = spec()
	s.Windows = []Window{{Start: "01:00", End: "01:01"}}
	f = newFake(s, 4)
	p = run(t, s, f, &Control{}, 200)
	require.Equal(t, PhaseWaiting, p.Phase)
	require.Empty(t, p.InFlight(), "the node started in the window finished")
	rotated := 0
	for _, n := range f.nodes {
		if n.version == "v2" {
			rotated++
		}
		require.False(t, n.unsched, n.name)
	}
	require.Equal(t, 1, rotated, "one wave started in the one-minute window")
}

func TestDrainDeadlineSkipDoesNotStallTheWave(t *testing.T) {
	s := spec()
	s.DrainPolicy = DrainSkip
	f := newFake(s, 4)
	f.blockOn = "canary-p-0"
	p := run(t, s, f, &Control{}, 600)
	require.Equal(t, PhaseDone, p.Phase)
	blocked := f.byName("canary-p-0")
	require.NotNil(t, blocked)
	require.Equal(t, "v1", blocked.version)
	require.False(t, blocked.unsched, "skipped node uncordoned")
	var skipped *Node
	for _, n := range p.Nodes {
		if n.Name == "canary-p-0" {
			skipped = n
		}
	}
	require.Equal(t, NodeSkipped, skipped.State)
	require.True(t, strings.Contains(skipped.Why, "ns/blocker"), skipped.Why)
}

func TestGateBreachPausesAndRollsBack(t *testing.T) {
	s := spec()
	f := newFake(s, 4)
	p := Progress{}
	now := t0
	p, start, _ := Advance(s, p, Control{}, f.pool("canary", "p"), Gate{}, now)
	require.Len(t, start, 1)
	p.Nodes[start[0].UID].State = NodeCordoned
	p.Nodes[start[0].UID].Cordoned = true
	p, start, evs := Advance(s, p, Control{}, f.pool("canary", "p"), Gate{Breach: "App web below its budget"}, now.Add(time.Second))
	require.Empty(t, start)
	require.Equal(t, PhasePaused, p.Phase)
	require.Equal(t, ByGate, p.PausedBy)
	require.Equal(t, EvPaused, evs[0].Name)
	require.True(t, Rollback(s, p))
	// The gate holds again: still paused until a resume given after it.
	p2, _, _ := Advance(s, p, Control{}, f.pool("canary", "p"), Gate{}, now.Add(time.Minute))
	require.Equal(t, PhasePaused, p2.Phase)
	uid := start0(p)
	rolled, act := Step(s, *p.Nodes[uid], Observed{Exists: true, Unschedulable: true}, Rollback(s, p), now.Add(2*time.Second))
	require.Equal(t, NodeRolled, rolled.State)
	require.Equal(t, ActUncordon, act)
	p.Nodes[uid] = &rolled
	p2, _, _ = Advance(s, p, Control{ResumeSeq: 1}, f.pool("canary", "p"), Gate{}, now.Add(time.Minute))
	require.Equal(t, PhaseSoaking, p2.Phase, "resumed: the gate must hold for a soak first")
	_, start, _ = Advance(s, p2, Control{ResumeSeq: 1}, f.pool("canary", "p"), Gate{}, p2.SoakUntil.Add(time.Second))
	require.Len(t, start, 1)
	require.Equal(t, uid, start[0].UID, "a rolled-back node is rotated after the resume")
	require.Equal(t, []string{"canary"}, p.Touched, "no later cluster touched")
}

func TestAbort(t *testing.T) {
	s := spec()
	f := newFake(s, 4)
	ctl := &Control{}
	p := run(t, s, f, ctl, 3)
	require.NotEmpty(t, p.InFlight())
	ctl.Abort = true
	p = run(t, s, f, ctl, 50)
	require.Equal(t, PhaseAborted, p.Phase)
	for _, n := range f.nodes {
		require.False(t, n.unsched, n.name)
	}
}

func TestGateHoldKeepsTheSoak(t *testing.T) {
	s := spec()
	f := newFake(s, 4)
	pool := f.pool("canary", "p")
	p, start, _ := Advance(s, Progress{}, Control{}, pool, Gate{}, t0)
	require.Len(t, start, 1)
	p.Nodes[start[0].UID].State = NodeDone
	p, _, evs := Advance(s, p, Control{}, pool, Gate{}, t0.Add(time.Second))
	require.Equal(t, PhaseSoaking, p.Phase)
	require.Equal(t, EvWaveSoaking, evs[0].Name)
	// Past the soak, a breach being confirmed holds the next wave back.
	late := p.SoakUntil.Add(time.Second)
	held, start, _ := Advance(s, p, Control{}, pool, Gate{Hold: "App web 2/3"}, late)
	require.Empty(t, start)
	require.Equal(t, PhaseSoaking, held.Phase)
	require.Equal(t, 1, held.Wave)
	// Once the gate holds, the next wave starts.
	next, start, _ := Advance(s, held, Control{}, pool, Gate{}, late)
	require.Len(t, start, 1)
	require.Equal(t, 2, next.Wave)
}

// start0 is the UID of the one node of p.
func start0(p Progress) string {
	for uid := range p.Nodes {
		return uid
	}
	return ""
}
