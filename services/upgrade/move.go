package upgrade

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/bus"
	"atoll.dev/libs/disruption"
	"atoll.dev/services/upgrade/plan"
)

// AnnoCordonedBy marks a node this service cordoned (the same annotation
// remediation uses: a cordoned node without it was cordoned by a human).
const AnnoCordonedBy = "atoll.dev/cordoned-by"

// progress is a plan's progress with the revision it was read at.
type progress struct {
	p   plan.Progress
	rev uint64
}

// store writes p (compare-and-set on its revision), gzipped once it is
// larger than bus.CompressOver: a plan's progress holds every node it put
// in a wave (about 320 bytes of JSON each), which past about 3,300 nodes
// would no longer fit in one NATS message; compressed, it is about a
// tenth of that.
func (s *Service) store(ctx context.Context, name string, pr *progress) error {
	b, err := json.Marshal(pr.p)
	if err != nil {
		return err
	}
	if b, err = bus.Compress(b); err != nil {
		return fmt.Errorf("store progress: %w", err)
	}
	var rev uint64
	if pr.rev == 0 {
		rev, err = s.kv.Create(ctx, ProgressKey(name), b)
	} else {
		rev, err = s.kv.Update(ctx, ProgressKey(name), b, pr.rev)
	}
	if err != nil {
		return fmt.Errorf("store progress: %w", err)
	}
	pr.rev = rev
	return nil
}

// move runs one tick of plan name; it reports whether the plan is
// unfinished. A plan behind another unfinished one (first) holds: it
// starts no wave.
func (s *Service) move(ctx context.Context, name, first string) (active bool, err error) {
	err = s.moveOnce(ctx, name, first, &active)
	return active, err
}

func (s *Service) moveOnce(ctx context.Context, name, first string, active *bool) error {
	var spec plan.Spec
	if _, err := get(ctx, s.kv, SpecKey(name), &spec); err != nil {
		return err
	}
	spec.Default()
	var ctl plan.Control
	if _, err := get(ctx, s.kv, ControlKey(name), &ctl); err != nil {
		return err
	}
	pr := &progress{}
	rev, err := get(ctx, s.kv, ProgressKey(name), &pr.p)
	if err != nil {
		return err
	}
	pr.rev = rev
	pr.p.Plan = name
	if err := spec.Validate(); err != nil {
		if pr.p.Phase != plan.PhasePaused {
			plan.Pause(&pr.p, plan.ByNode, "invalid plan: "+err.Error(), ctl)
			return s.store(ctx, name, pr)
		}
		return nil
	}
	if pr.p.Phase == plan.PhaseDone || pr.p.Phase == plan.PhaseAborted {
		return nil
	}
	*active = true
	now := time.Now()

	// The current pool and the gate.
	cname := pr.p.CurrentCluster(&spec)
	var pool []plan.PoolNode
	var nodes map[string]*corev1.Node // the current cluster's, by UID
	gate := plan.Gate{}
	if cname != "" {
		m := s.clusters[cname]
		if m == nil {
			gate.Breach = "no credentials for cluster " + cname
		} else {
			nodes, err = s.nodes(ctx, m)
			if err == nil {
				err = s.reachable(ctx, m)
			}
			if err != nil {
				gate.Breach = "cluster " + cname + " API unreachable: " + err.Error()
			} else {
				pname := spec.Clusters[pr.p.Cluster].Pools[pr.p.Pool].Name
				for _, n := range nodes {
					if n.Labels[disruption.LabelPool] == pname && n.DeletionTimestamp == nil {
						pool = append(pool, plan.PoolNode{UID: string(n.UID), Name: n.Name,
							Version: n.Labels[spec.Target.Label], Ready: ready(n)})
					}
				}
				gate.Breach = s.gate(ctx, m, pr.p.Phase == plan.PhaseSoaking, rotationStart(pr.p, cname), now)
			}
		}
	}
	// A breach must last GateGrace: the aggregator's status lags the
	// member clusters by a moment, and a drain the budgets allow makes an
	// App dip to (never below) its budget.
	if gate.Breach != "" {
		since, ok := s.breachSince[name]
		if !ok {
			since = now
			s.breachSince[name] = now
		}
		if now.Sub(since) < GateGrace {
			gate.Hold, gate.Breach = gate.Breach, ""
		}
	} else {
		delete(s.breachSince, name)
	}
	if first != "" && gate.Breach == "" {
		gate.Hold = "plan " + first + " rotates first"
	}
	next, start, evs := plan.Advance(&spec, pr.p, ctl, pool, gate, now)
	surged := 0
	for _, n := range next.InFlight() {
		if n.Surge && n.Cluster == cname {
			surged++
		}
	}
	for _, n := range start {
		if n.Surge {
			surged++
		}
	}
	// The wave's nodes are leased together, one ledger write per cluster.
	var (
		fl      = fleetOf(nodes)
		totals  = poolTotals(nodes)
		reqs    = map[string][]disruption.Request{}
		leasing = map[string][]*plan.Node{}
	)
	for _, n := range start {
		if nodes != nil && nodes[n.UID] == nil {
			// Deleted before it started (remediation replaced it): never
			// leased; its replacement is rotated in a later wave.
			n.State, n.Since, n.Why = plan.NodeGone, now, "deleted before it started"
			continue
		}
		reqs[n.Cluster] = append(reqs[n.Cluster], request(&spec, n, fl, totals, surged))
		leasing[n.Cluster] = append(leasing[n.Cluster], n)
	}
	for c, rs := range reqs {
		_, errs, err := s.ledger.AcquireAll(ctx, rs)
		for i, n := range leasing[c] {
			why := err
			if why == nil {
				why = errs[i]
			}
			if why != nil {
				s.log.Info("node not started", "plan", name, "node", n.Name, "why", why)
				continue
			}
			n.State, n.Since = plan.NodeLeased, now
			delete(s.released, n.UID)
		}
	}
	pr.p = next
	if err := s.store(ctx, name, pr); err != nil {
		return err
	}
	s.publish(ctx, name, pr, evs)

	// Every node of the plan in flight (and terminal ones: their leases).
	// The pending pods of a cluster are read once per tick for all its
	// nodes. Every node is stepped first and what the steps decided is
	// stored once, before any of their side effects; then the side
	// effects run, and what the drains recorded is stored once more. A
	// tick thus writes the progress (which holds every node of the plan)
	// at most three times however many nodes are in flight, not once per
	// node that moved.
	var (
		steps   []stepped
		nodeEvs []plan.Event
		changed bool
	)
	pending := map[string][]time.Time{}
	rb := plan.Rollback(&spec, pr.p)
	for _, uid := range slices.Sorted(maps.Keys(pr.p.Nodes)) {
		n := pr.p.Nodes[uid]
		if !n.State.Started() {
			continue
		}
		m := s.clusters[n.Cluster]
		if m == nil {
			continue
		}
		if n.State.Terminal() {
			// Released when its cluster was current, or this term: Step has
			// nothing more for it (a terminal node only releases), so a
			// rotated node costs no observation on later ticks.
			if n.Cluster != cname || s.released[n.UID] {
				continue
			}
		}
		cn, err := s.clusterNodes(ctx, m, cname, nodes)
		if err != nil {
			continue // unreachable: the gate pauses the plan; nothing is done blind
		}
		obs := s.observe(ctx, m, n, cn, pending)
		was := *n
		after, act := plan.Step(&spec, *n, obs, rb, now)
		if (act == plan.ActSurge || act == plan.ActReplace) && after.Replacement == "" {
			after.Replacement = disruption.ReplacementName(cn[uid], 0)
		}
		switch {
		case act == plan.ActPause && pr.p.Phase != plan.PhasePaused:
			plan.Pause(&pr.p, plan.ByNode, n.Name+": "+after.Why, ctl)
			nodeEvs = append(nodeEvs, plan.Event{Cluster: n.Cluster, Name: plan.EvPaused, Message: pr.p.Reason})
			changed = true
		case after.State == plan.NodeDone && was.State != plan.NodeDone:
			nodeEvs = append(nodeEvs, plan.Event{Cluster: n.Cluster, Name: plan.EvNodeRotated, Message: n.Name + " -> " + after.Replacement})
		case after.State == plan.NodeSkipped && was.State != plan.NodeSkipped:
			nodeEvs = append(nodeEvs, plan.Event{Cluster: n.Cluster, Name: plan.EvNodeSkipped, Message: n.Name + ": " + after.Why})
		}
		pr.p.Nodes[uid] = &after
		changed = changed || !equalNode(was, after)
		steps = append(steps, stepped{m: m, k: cn[uid], n: &after, act: act})
	}
	if changed || len(nodeEvs) > 0 {
		if err := s.store(ctx, name, pr); err != nil {
			return err // a successor holds the plan: act on nothing
		}
		s.publish(ctx, name, pr, nodeEvs)
	}
	held := s.renewAll(ctx, steps2refs(steps))
	drained := false
	for _, st := range steps {
		if err := s.act(ctx, &spec, st.m, st.n, st.k, st.act, held[st.n.UID]); err != nil {
			s.log.Warn("node action", "plan", name, "node", st.n.Name, "action", st.act, "err", err)
		}
		drained = drained || st.act == plan.ActDrain || st.act == plan.ActForce
	}
	if drained {
		// A drain pass records the pods it evicted and the budget that
		// blocked it.
		if err := s.store(ctx, name, pr); err != nil {
			return err
		}
	}
	return nil
}

func equalNode(a, b plan.Node) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// clusterNodes returns the nodes of m by UID (those of the current
// cluster are listed already).
func (s *Service) clusterNodes(ctx context.Context, m *member, current string, cur map[string]*corev1.Node) (map[string]*corev1.Node, error) {
	if m.name == current && cur != nil {
		return cur, nil
	}
	return s.nodes(ctx, m)
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// stepped is a node a tick stepped, and the action it is to take.
type stepped struct {
	m   *member
	k   *corev1.Node // nil when gone
	n   *plan.Node   // the progress's own record, which act updates
	act plan.Action
}

// fleetOf is what the ledger is told of a cluster's nodes.
func fleetOf(nodes map[string]*corev1.Node) disruption.Fleet {
	fleet := make(disruption.Fleet, len(nodes))
	for uid, k := range nodes {
		fleet[uid] = disruption.FleetNode{Pool: k.Labels[disruption.LabelPool], NotReady: !ready(k)}
	}
	return fleet
}

// poolTotals counts a cluster's nodes by pool.
func poolTotals(nodes map[string]*corev1.Node) map[string]int {
	out := map[string]int{}
	for _, k := range nodes {
		out[k.Labels[disruption.LabelPool]]++
	}
	return out
}

// request asks for the ledger lease of n within the pool's budget (the
// plan's max unavailable) and the shared cluster budget; totals are the
// nodes of n's cluster by pool.
func request(spec *plan.Spec, n *plan.Node, fleet disruption.Fleet, totals map[string]int, surged int) disruption.Request {
	// A surged node leaves its pool's capacity whole: its lease is
	// bounded by the cluster only. A drained-first node's pool limit is
	// the wave's max unavailable plus this plan's surged nodes in flight
	// (leased already, counted by the ledger, but not unavailable), so
	// remediation's nodes and the plan's together stay within it.
	budget := disruption.Budget{Cluster: disruption.Limit(spec.ClusterBudget)}
	if !n.Surge {
		for _, c := range spec.Clusters {
			for _, p := range c.Pools {
				if c.Name == n.Cluster && p.Name == n.Pool {
					u, _ := plan.MaxUnavailable(p.MaxUnavailable, totals[n.Pool])
					budget.Pool = disruption.Limit(strconv.Itoa(max(u, 1) + surged))
				}
			}
		}
	}
	return disruption.Request{
		Node:  disruption.NodeRef{Cluster: n.Cluster, Pool: n.Pool, Name: n.Name, UID: n.UID},
		Owner: Owner, Reason: "rotate to " + spec.Target.Label + "=" + spec.Target.Value,
		TTL: LeaseTTL, Budget: budget, Fleet: fleet,
	}
}

// observe reads what Step needs of n.
func (s *Service) observe(ctx context.Context, m *member, n *plan.Node, nodes map[string]*corev1.Node, pending map[string][]time.Time) plan.Observed {
	o := plan.Observed{}
	if k := nodes[n.UID]; k != nil {
		o.Exists, o.Unschedulable = true, k.Spec.Unschedulable
		// Drained is what the last pass found, recorded as Blocked == ""
		// and no evictable pod left: asked again here, cheaply.
		if n.State == plan.NodeDraining && !n.DrainStarted.IsZero() {
			o.Drained = s.empty(ctx, m, k.Name)
		}
	}
	if n.Replacement != "" {
		for _, k := range nodes {
			if k.Name == n.Replacement {
				o.ReplacementReady = ready(k)
			}
		}
	}
	since := n.DrainStarted
	if since.IsZero() {
		since = n.Since
	}
	created, ok := pending[m.name]
	if !ok {
		var err error
		if created, err = s.pendingPods(ctx, m); err != nil {
			return o // not known: the workloads are not taken as available
		}
		pending[m.name] = created
	}
	o.WorkloadsAvailable = noneSince(created, since)
	return o
}

// empty reports whether nothing evictable is left on node.
func (s *Service) empty(ctx context.Context, m *member, node string) bool {
	pods, err := m.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return false
	}
	for _, p := range pods.Items {
		if p.Annotations[disruption.AnnoMirror] != "" || p.DeletionTimestamp != nil && p.Status.Phase != corev1.PodRunning {
			continue
		}
		if ref := metav1.GetControllerOf(&p); ref != nil && ref.Kind == "DaemonSet" {
			continue
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		return false
	}
	return true
}

// noneSince reports whether no pod of created was made since (the
// displaced workloads' new pods, to the second: creation times are): they
// run again. Pods pending from before (an unschedulable notebook) are not
// the rotation's.
func noneSince(created []time.Time, since time.Time) bool {
	for _, c := range created {
		if !c.Before(since.Truncate(time.Second)) {
			return false
		}
	}
	return true
}

// rotationStart is when the plan's first drain in cluster started (zero
// before any): pods made since may be the rotation's.
func rotationStart(p plan.Progress, cluster string) time.Time {
	var first time.Time
	for _, n := range p.Nodes {
		if n.Cluster == cluster && !n.DrainStarted.IsZero() && (first.IsZero() || n.DrainStarted.Before(first)) {
			first = n.DrainStarted
		}
	}
	return first
}

// act performs one side effect, idempotently.
// renews says whether act renews n's ledger lease before it acts.
func renews(n *plan.Node, act plan.Action) bool {
	switch act {
	case plan.ActNone, plan.ActPause:
		return n.State.Started() && !n.State.Terminal()
	case plan.ActRelease:
		return false
	}
	return true
}

// leaseState is what a tick's renewal of every lease (renewAll) found of
// one node's lease.
type leaseState int

const (
	leaseUnknown leaseState = iota // not renewed together: act renews it
	leaseRenewed
	leaseNotHeld
)

// steps2refs lists the nodes of steps whose act renews their lease.
func steps2refs(steps []stepped) []disruption.NodeRef {
	var out []disruption.NodeRef
	for _, st := range steps {
		if renews(st.n, st.act) {
			out = append(out, disruption.NodeRef{Cluster: st.n.Cluster, Pool: st.n.Pool, Name: st.n.Name, UID: st.n.UID})
		}
	}
	return out
}

// renewAll renews the leases of refs, one ledger write per cluster, and
// returns what it found of each, by UID (leaseUnknown where the write
// failed: act renews those itself).
func (s *Service) renewAll(ctx context.Context, refs []disruption.NodeRef) map[string]leaseState {
	byCluster := map[string][]disruption.NodeRef{}
	for _, r := range refs {
		byCluster[r.Cluster] = append(byCluster[r.Cluster], r)
	}
	out := map[string]leaseState{}
	for c, rs := range byCluster {
		notHeld, err := s.ledger.RenewAll(ctx, c, Owner, rs, LeaseTTL)
		if err != nil {
			s.log.Warn("renew leases", "cluster", c, "nodes", len(rs), "err", err)
			continue
		}
		for _, r := range rs {
			out[r.UID] = leaseRenewed
			if notHeld[r.UID] {
				out[r.UID] = leaseNotHeld
			}
		}
	}
	return out
}

// act performs one side effect, idempotently; held is what the tick's
// renewal found of n's lease.
func (s *Service) act(ctx context.Context, spec *plan.Spec, m *member, n *plan.Node, k *corev1.Node, act plan.Action, held leaseState) error {
	ref := disruption.NodeRef{Cluster: n.Cluster, Pool: n.Pool, Name: n.Name, UID: n.UID}
	renew := func() error {
		switch held {
		case leaseRenewed:
			return nil
		case leaseNotHeld:
			return fmt.Errorf("renew %s: %w", n.Name, disruption.ErrNotHeld)
		}
		return s.ledger.Renew(ctx, ref, Owner, LeaseTTL)
	}
	switch act {
	case plan.ActNone, plan.ActPause:
		if renews(n, act) {
			return renew()
		}
		return nil
	case plan.ActRelease:
		if s.released[n.UID] {
			return nil
		}
		if err := s.ledger.Release(ctx, ref, Owner); err != nil {
			return err
		}
		s.released[n.UID] = true
		return nil
	}
	if err := renew(); errors.Is(err, disruption.ErrNotHeld) {
		// The lease lapsed (the service was down longer than its TTL): take
		// it again before acting, unless another owner has the node now.
		// The node was within the budget when it started; it is not counted
		// again.
		if _, err := s.ledger.Acquire(ctx, disruption.Request{Node: ref, Owner: Owner,
			Reason: "rotate to " + spec.Target.Label + "=" + spec.Target.Value, TTL: LeaseTTL}); err != nil {
			return fmt.Errorf("%s: lease lapsed: %w", n.Name, err)
		}
	} else if err != nil {
		return err
	}
	labels := map[string]string{spec.Target.Label: spec.Target.Value}
	switch act {
	case plan.ActCordon, plan.ActUncordon:
		if k == nil {
			return nil
		}
		patch := `{"metadata":{"annotations":{"` + AnnoCordonedBy + `":"upgrade"}},"spec":{"unschedulable":true}}`
		if act == plan.ActUncordon {
			patch = `{"metadata":{"annotations":{"` + AnnoCordonedBy + `":null}},"spec":{"unschedulable":false}}`
		}
		_, err := m.cs.CoreV1().Nodes().Patch(ctx, k.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	case plan.ActDrain, plan.ActForce:
		if k == nil {
			return nil
		}
		skip := map[string]bool{}
		for _, uid := range n.Evicted {
			skip[uid] = true
		}
		res, err := disruption.Drain(ctx, m.cs, k.Name, disruption.DrainOptions{Force: act == plan.ActForce, Skip: skip, SkipTerminatingAfter: time.Minute})
		for _, p := range append(res.Evicted, res.Deleted...) {
			n.Evicted = append(n.Evicted, p.UID)
		}
		n.Blocked = ""
		if len(res.Blocked) > 0 {
			n.Blocked = res.Blocked[0].PDB
		}
		return err
	case plan.ActSurge:
		if k == nil || m.caches.hasNode(n.Replacement) {
			return nil // made already: Step waits for it to be Ready
		}
		return surge(ctx, m.provider, k, disruption.Replacement{Name: n.Replacement, Labels: labels})
	case plan.ActReplace:
		old := k
		if old == nil && m.caches.hasNode(n.Replacement) {
			return nil // the old node is gone and its replacement made
		}
		if old == nil {
			// The old node is gone already: the provider only creates.
			old = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: types.UID(n.UID)}}
		}
		return m.provider.Replace(ctx, old, disruption.Replacement{Name: n.Replacement, Labels: labels})
	}
	return nil
}

// surge creates r ahead of old without deleting old. disruption.Provider
// has only Replace (create, then delete with old's UID as a
// precondition); Replace on a copy of old with another UID creates r and
// its delete is refused by the precondition (a conflict Replace ignores),
// so old stays until the Replace after its drain. This wraps the shared
// library instead of changing it.
func surge(ctx context.Context, p disruption.Provider, old *corev1.Node, r disruption.Replacement) error {
	ghost := old.DeepCopy()
	ghost.UID = types.UID("surge-" + string(old.UID))
	return p.Replace(ctx, ghost, r)
}

// publish emits evs after the progress that caused them is stored.
func (s *Service) publish(ctx context.Context, name string, pr *progress, evs []plan.Event) {
	for _, e := range evs {
		if e.Cluster == "" {
			continue
		}
		pr.p.Seq++
		body, _ := json.Marshal(map[string]string{"plan": name, "event": e.Name, "message": e.Message})
		if _, err := s.bus.Publish(ctx, bus.ClusterSubject(e.Cluster, e.Name), bus.MsgID(name, uint64(pr.p.Seq)), body, nil); err != nil {
			s.log.Warn("publish event", "plan", name, "event", e.Name, "err", err)
		}
	}
}

// gate reads the SLO gate of cluster m: "" when it holds. While a wave
// soaks, its displaced workloads must be back in full: an App shard
// below its desired count breaches; otherwise (a wave in flight) only one
// below its availability budget does.
func (s *Service) gate(ctx context.Context, m *member, soaking bool, since, now time.Time) string {
	pods, err := s.pendingList(m)
	if err != nil {
		return "cluster " + m.name + " API unreachable: " + err.Error()
	}
	for _, p := range pods {
		made := p.CreationTimestamp.Time
		if !since.IsZero() && !made.Before(since.Truncate(time.Second)) && now.Sub(made) > PendingGrace {
			return "pod " + p.Namespace + "/" + p.Name + " pending for over " + PendingGrace.String()
		}
	}
	v, err := s.view(ctx)
	if err != nil {
		return "status unreadable: " + err.Error()
	}
	// The breach named is the first App by key, so that a tick after
	// tick reads the same one.
	breach, first := "", ""
	for _, key := range v.shares.Keys() {
		e, ok := v.shares.Get(key)
		if !ok || e.Err != nil {
			continue
		}
		sh, ok := e.Value[m.name]
		if !ok {
			continue
		}
		b, ok := v.budgets.Get(key)
		if !ok || b.Err != nil || !b.Value.App {
			continue
		}
		// As a PodDisruptionBudget computes it: percentages round up.
		kind := b.Value.Kind
		n, err := intstr.GetScaledValueFromIntOrPercent(ptr.To(intstr.Parse(b.Value.Value)), int(sh.Desired), true)
		if err != nil {
			continue
		}
		allowed := n
		if kind == "minAvailable" {
			allowed = int(sh.Desired) - n
		}
		if soaking {
			allowed = 0
		}
		if int(sh.Desired-sh.Ready) > allowed && (first == "" || key < first) {
			first = key
			breach = "App " + key + " below its budget in " + m.name + ": " + strconv.Itoa(int(sh.Ready)) + "/" + strconv.Itoa(int(sh.Desired)) + " ready"
		}
	}
	return breach
}
