package remediation

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"

	"atoll.dev/libs/bus"
	"atoll.dev/libs/clusters"
	"atoll.dev/libs/disruption"
)

// AnnoCordonedBy marks a node this service cordoned; a cordoned node
// without it was cordoned by a human and is left alone.
const AnnoCordonedBy = "atoll.dev/cordoned-by"

// labelZone is the node label of its zone.
const labelZone = "topology.kubernetes.io/zone"

// cluster is one member cluster as every replica knows it.
type cluster struct {
	s      *Service
	member clusters.Member
	conn   *clusters.Conn // cs's transport and connections, closed on Stop
	cs     kubernetes.Interface
	// watchCS is cs without its timeout, for the informers (nil: cs).
	watchCS  kubernetes.Interface
	provider disruption.Provider
	log      *slog.Logger
}

func newCluster(s *Service, m clusters.Member) (*cluster, error) {
	cfg, err := m.RESTConfig()
	if err != nil {
		return nil, err
	}
	conn, err := clusters.Connect(cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", m.Name, err)
	}
	cs, err := kubernetes.NewForConfigAndClient(cfg, conn.HTTP)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", m.Name, err)
	}
	// Informers' watches must not time out (cfg.Timeout is the client's
	// whole-request timeout: a watch cut every 15 s is opened again, and
	// the first list of a large cluster's pods may take longer): the same
	// transport, no timeout.
	wcfg := rest.CopyConfig(cfg)
	wcfg.Timeout = 0
	watchCS, err := kubernetes.NewForConfigAndClient(wcfg, &http.Client{Transport: conn.HTTP.Transport})
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", m.Name, err)
	}
	return &cluster{s: s, member: m, conn: conn, cs: cs, watchCS: watchCS, provider: &disruption.KWOK{Client: cs}, log: s.log.With("cluster", m.Name)}, nil
}

// ClusterView is the value of StatusKey: one cluster's view.
type ClusterView struct {
	Cluster   string         `json:"cluster"`
	Holder    string         `json:"holder"`
	Reachable bool           `json:"reachable"`
	Paused    string         `json:"paused,omitempty"`
	Breakers  []BreakerState `json:"breakers,omitempty"`
	Time      time.Time      `json:"time"`
}

// StatusKey is the key of a cluster's view.
func StatusKey(cluster string) string { return "s." + cluster }

// node is one node's state in a term, with its key's revision.
type node struct {
	st        NodeState
	rev       uint64
	written   []byte // the value at rev
	published int    // the highest history seq known published
	fresh     bool   // made in this term, or its earlier events checked: publish without asking the stream
	renewed   time.Time
}

// term is one lease term of a cluster.
type term struct {
	c     *cluster
	log   *slog.Logger
	nodes corelisters.NodeLister

	limiter  *rate.Limiter
	limitFor [2]float64 // the policy the limiter was made for
	breakers Breakers
	view     []byte // the view as last written

	reachable  bool
	watchSince time.Time
	pausedWhy  string // why new actions are paused, "" when not

	states map[string]*node // by node UID
}

// lead runs one term of the cluster's lease.
func (c *cluster) lead(ctx context.Context) {
	f := informers.NewSharedInformerFactory(c.informerClient(), 0)
	inf := f.Core().V1().Nodes().Informer()
	if err := inf.SetTransform(clusters.SlimNode); err != nil {
		c.log.Error("node transform", "err", err)
		return
	}
	t := &term{c: c, log: c.log, nodes: f.Core().V1().Nodes().Lister(), breakers: Breakers{}, states: map[string]*node{}}
	defer f.Shutdown()
	if err := t.load(ctx); err != nil {
		if ctx.Err() == nil {
			c.log.Error("load node states", "err", err)
		}
		return
	}
	f.Start(ctx.Done())
	c.log.Info("remediating member cluster", "nodes with state", len(t.states))
	tick := time.NewTicker(Tick)
	defer tick.Stop()
	for {
		t.probe(ctx, inf.HasSynced())
		if t.reachable {
			if err := t.reconcile(ctx); err != nil && ctx.Err() == nil {
				t.log.Warn("reconcile", "err", err)
			}
		}
		t.c.s.own.observe(t, time.Now())
		if err := t.writeView(ctx); err != nil && ctx.Err() == nil {
			t.log.Warn("write cluster view", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// load reads the cluster's node states and its view (breakers cooling).
func (t *term) load(ctx context.Context) error {
	kv := t.c.s.kv
	lister, err := kv.ListKeysFiltered(ctx, "n."+t.c.member.Name+".*")
	if err != nil {
		return err
	}
	for k := range lister.Keys() {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		var st NodeState
		if err := json.Unmarshal(e.Value(), &st); err != nil {
			t.log.Error("node state unreadable; dropped", "key", k, "err", err)
			continue
		}
		t.states[st.UID] = &node{st: st, rev: e.Revision(), written: e.Value()}
	}
	if e, err := kv.Get(ctx, StatusKey(t.c.member.Name)); err == nil {
		var v ClusterView
		if json.Unmarshal(e.Value(), &v) == nil {
			for _, b := range v.Breakers {
				t.breakers[b.Domain] = &b
			}
		}
	}
	return nil
}

// probe checks the API server; the cluster is reachable while probes
// pass and the informer has synced. Regaining reachability restarts
// every unhealthy clock (WatchSince).
func (t *term) probe(ctx context.Context, synced bool) {
	pctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	err := t.c.cs.Discovery().RESTClient().Get().AbsPath("/readyz").Do(pctx).Error()
	now := time.Now()
	ok := err == nil && synced
	if ok && !t.reachable {
		t.watchSince = now
		t.log.Info("member cluster reachable: unhealthy clocks start now")
	}
	if !ok && t.reachable {
		t.log.Warn("member cluster unreachable: no action on its nodes", "err", err)
	}
	t.reachable = ok
}

// reconcile steps every node once.
func (t *term) reconcile(ctx context.Context) error {
	s := t.c.s
	p, err := s.policy(ctx)
	if err != nil {
		return err
	}
	paused, err := s.paused(ctx, t.c.member.Name)
	if err != nil {
		return err
	}
	t.pausedWhy = paused
	t.ensureLimiter(p)
	list, err := t.nodes.List(everything)
	if err != nil {
		return err
	}
	byUID := map[string]*corev1.Node{}
	byName := map[string]*corev1.Node{}
	fleet := disruption.FleetOf(list)
	counts := map[string]Count{}
	add := func(domain string, unhealthy bool) {
		c := counts[domain]
		c.Total++
		if unhealthy {
			c.Unhealthy++
		}
		counts[domain] = c
	}
	obs := map[string]Observation{}
	for _, n := range list {
		uid := string(n.UID)
		byUID[uid], byName[n.Name] = n, n
		pool := n.Labels[disruption.LabelPool]
		bad, signal := unhealthy(n, p.For(pool).Conditions)
		add("pool/"+pool, bad)
		add("cluster/"+t.c.member.Name, bad)
		add("zone/"+n.Labels[labelZone], bad)
		obs[uid] = Observation{Present: true, Unhealthy: bad, Signal: signal, WatchSince: t.watchSince,
			Cordoned: n.Spec.Unschedulable, CordonedByUs: n.Annotations[AnnoCordonedBy] == Owner}
		if _, ok := t.states[uid]; !ok {
			t.states[uid] = &node{fresh: true, st: NodeState{Cluster: t.c.member.Name, Node: n.Name, UID: uid, Pool: pool,
				Zone: n.Labels[labelZone], Phase: PhaseHealthy}}
		}
	}
	now := time.Now()
	changed, err := t.breakers.Update(counts, p.MaxUnhealthy, p.Cooldown.D(), now)
	if err != nil {
		return err
	}
	for _, d := range changed {
		b := t.breakers[d]
		t.log.Warn("storm breaker", "domain", d, "open", b.Open, "unhealthy", b.Unhealthy, "total", b.Total, "allowed", b.Allowed)
	}
	flap := Flap{Transitions: p.FlapTransitions, Window: p.FlapWindow.D()}
	var errs []error
	for _, uid := range slices.Sorted(maps.Keys(t.states)) {
		n := t.states[uid]
		o := obs[uid]
		if n.st.Replace.Name != "" {
			if r, ok := byName[n.st.Replace.Name]; ok && disruption.Ready(r) {
				o.ReplacementReady = true
			}
		}
		steps := p.For(n.st.Pool)
		act := Step(&n.st, o, now, steps, flap)
		if err := t.act(ctx, n, act, byUID[uid], byName, p, fleet, now); err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", n.st.Node, act, err))
		} else if act != ActStart || n.st.Phase == PhaseCordoned {
			s.own.acted(t.c.member.Name, act)
		}
		if act == ActForget {
			if err := t.forget(ctx, n); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if err := t.save(ctx, n); err != nil {
			errs = append(errs, err)
			continue
		}
		t.publish(ctx, n)
	}
	return errors.Join(errs...)
}

var everything = labels.Everything()

// act performs a Step's action; the state records its outcome.
func (t *term) act(ctx context.Context, n *node, act Action, live *corev1.Node, byName map[string]*corev1.Node, p Policy, fleet disruption.Fleet, now time.Time) error {
	s := t.c.s
	ref := n.st.ref()
	steps := p.For(n.st.Pool)
	if n.st.Active() && act != ActStop && now.Sub(n.renewed) > p.LeaseTTL.D()/3 {
		if err := s.ledger.Renew(ctx, ref, Owner, p.LeaseTTL.D()); err != nil {
			t.log.Warn("renew disruption lease", "node", ref.Name, "err", err)
		} else {
			n.renewed = now
		}
	}
	switch act {
	case ActStart:
		if why := t.gate(ctx, n, p, fleet); why != "" {
			n.st.Waiting = why
			return nil
		}
		if err := t.cordon(ctx, live, true); err != nil {
			_ = s.ledger.Release(ctx, ref, Owner)
			return err
		}
		n.renewed = now
		n.st.Started(now, fmt.Sprintf("%s for %s", n.st.Signal, now.Sub(n.st.UnhealthySince).Round(time.Second)))
	case ActDrain:
		skip := map[string]bool{}
		for _, pod := range n.st.Drain.Evicted {
			skip[pod.UID] = true
		}
		o := disruption.DrainOptions{Force: n.st.Drain.Force, Skip: skip, SkipTerminatingAfter: steps.SkipWaitForDelete.D()}
		if steps.PodGracePeriod != nil {
			g := int64(steps.PodGracePeriod.D() / time.Second)
			o.GracePeriod = &g
		}
		res, err := disruption.Drain(ctx, t.c.cs, n.st.Node, o)
		if err != nil {
			return err
		}
		n.st.Drained(now, res, steps)
	case ActReplace, ActRetryReplace:
		if act == ActRetryReplace {
			n.st.NextReplacement(now)
		}
		template := live
		if template == nil && n.st.Replace.Prev != "" {
			template = byName[n.st.Replace.Prev]
		}
		if template == nil {
			if n.st.Replace.Name != "" {
				n.st.Replace.Done = true // the old node went: the call got through
				return nil
			}
			n.st.setPhase(PhaseNeedsHuman, now)
			n.st.event(now, EvNeedsHuman, "nothing left to replace from")
			return nil
		}
		if n.st.Replace.Name == "" {
			// The name is written before the provider is called: a standby
			// calls it again for the same name, never for a second node.
			n.st.Replace.Name = disruption.ReplacementName(template, n.st.Replace.Attempt)
			if err := t.save(ctx, n); err != nil {
				return err
			}
		}
		if err := t.c.provider.Replace(ctx, template, disruption.Replacement{Name: n.st.Replace.Name}); err != nil {
			return err
		}
		n.st.Replace.Done = true
	case ActStop:
		uncordon := live != nil && live.Annotations[AnnoCordonedBy] == Owner
		if uncordon {
			if err := t.cordon(ctx, live, false); err != nil {
				return err
			}
		}
		n.st.Stopped(now, uncordon)
		return s.ledger.Release(ctx, ref, Owner)
	case ActRelease, ActForget:
		return s.ledger.Release(ctx, ref, Owner)
	}
	return nil
}

// gate checks what must allow a new escalation, in order: pause, storm
// breakers, the token bucket, the disruption ledger. It returns why the
// escalation waits, "" when it may start (the ledger lease then held).
func (t *term) gate(ctx context.Context, n *node, p Policy, fleet disruption.Fleet) string {
	if t.pausedWhy != "" {
		return t.pausedWhy
	}
	if why := t.breakers.Blocking("pool/"+n.st.Pool, "cluster/"+t.c.member.Name, "zone/"+n.st.Zone); why != "" {
		return why
	}
	r := t.limiter.Reserve()
	if !r.OK() || r.Delay() > 0 {
		r.Cancel()
		return "rate limited: one new action per " + p.ActionEvery.D().String()
	}
	ref := n.st.ref()
	_, err := t.c.s.ledger.Acquire(ctx, disruption.Request{Node: ref, Owner: Owner, Reason: "remediate " + n.st.Signal,
		TTL: p.LeaseTTL.D(), Budget: p.Budget, Fleet: fleet})
	if err != nil {
		// The token goes back: nothing was done with it.
		r.Cancel()
		return "disruption ledger: " + err.Error()
	}
	return ""
}

// cordon sets (or clears) spec.unschedulable with this service's mark.
func (t *term) cordon(ctx context.Context, n *corev1.Node, on bool) error {
	if n == nil {
		return nil
	}
	var anno any
	if on {
		anno = Owner
	}
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{AnnoCordonedBy: anno}},
		"spec":     map[string]any{"unschedulable": on},
	})
	_, err := t.c.cs.CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cordon %s=%v: %w", n.Name, on, err)
	}
	return nil
}

// save writes a node's state when it changed: idle states are deleted.
func (t *term) save(ctx context.Context, n *node) error {
	kv := t.c.s.kv
	key := NodeKey(n.st.Cluster, n.st.UID)
	if n.st.Idle() {
		if n.rev == 0 {
			return nil
		}
		if _, err := bus.CompareAndDelete(ctx, t.c.s.bus.JS, kv, key, n.rev); err != nil {
			return t.conflict(ctx, n, err)
		}
		n.rev, n.written = 0, nil
		return nil
	}
	b, err := json.Marshal(n.st)
	if err != nil {
		return err
	}
	if bytes.Equal(b, n.written) {
		return nil
	}
	rev, err := bus.CompareAndSet(ctx, kv, key, b, n.rev)
	if err != nil {
		return t.conflict(ctx, n, err)
	}
	n.rev, n.written = rev, b
	return nil
}

// conflict reloads a node's revision after a lost compare-and-set (only
// the lease holder writes, so this follows a takeover race).
func (t *term) conflict(ctx context.Context, n *node, err error) error {
	if errors.Is(err, bus.ErrConflict) {
		if e, gerr := t.c.s.kv.Get(ctx, NodeKey(n.st.Cluster, n.st.UID)); gerr == nil {
			n.rev = e.Revision()
		} else if errors.Is(gerr, jetstream.ErrKeyNotFound) {
			n.rev = 0
		}
	}
	return fmt.Errorf("save %s: %w", n.st.Node, err)
}

func (t *term) forget(ctx context.Context, n *node) error {
	delete(t.states, n.st.UID)
	if n.rev == 0 {
		return nil
	}
	t.publish(ctx, n)
	if _, err := bus.CompareAndDelete(ctx, t.c.s.bus.JS, t.c.s.kv, NodeKey(n.st.Cluster, n.st.UID), n.rev); err != nil && !errors.Is(err, bus.ErrConflict) {
		return err
	}
	return nil
}

// NodeEvent is the body of a message on a node subject.
type NodeEvent struct {
	Cluster string `json:"cluster"`
	Node    string `json:"node"`
	UID     string `json:"uid"`
	Pool    string `json:"pool,omitempty"`
	Phase   Phase  `json:"phase"`
	Entry
}

// SubjectToken makes a node name a subject token (names may hold dots).
func SubjectToken(node string) string { return strings.ReplaceAll(node, ".", "_") }

// publish announces the history entries not published yet, in order; a
// new term first asks the stream what it holds (ensure).
func (t *term) publish(ctx context.Context, n *node) {
	for _, e := range n.st.History {
		if e.Seq <= n.published {
			continue
		}
		subj := bus.NodeSubject(n.st.Cluster, SubjectToken(n.st.Node), e.Event)
		// The time tells apart the events of a state that was dropped (idle)
		// and started over at seq 1.
		id := bus.MsgID(n.st.Cluster+"."+n.st.UID+"."+strconv.FormatInt(e.Time.UnixNano(), 36), uint64(e.Seq))
		if !n.fresh {
			// A state loaded by this term: its events up to the first the
			// stream lacks went out in an earlier term.
			if t.inStream(ctx, subj, n.st.UID, e) {
				n.published = e.Seq
				continue
			}
			n.fresh = true
		}
		body, _ := json.Marshal(NodeEvent{Cluster: n.st.Cluster, Node: n.st.Node, UID: n.st.UID, Pool: n.st.Pool, Phase: n.st.Phase, Entry: e})
		t.log.Info("node event", "node", n.st.Node, "event", e.Event, "seq", e.Seq, "phase", n.st.Phase, "message", e.Message)
		if _, err := t.c.s.bus.Publish(ctx, subj, id, body, nil); err != nil {
			t.log.Warn("publish node event", "subject", subj, "err", err)
			return
		}
		n.published = e.Seq
	}
}

// inStream reports whether the stream's last message on subj is this
// event of the node or a later one.
func (t *term) inStream(ctx context.Context, subj, uid string, e Entry) bool {
	st, err := t.c.s.bus.Stream(ctx, bus.StreamSignals)
	if err != nil {
		return false
	}
	m, err := st.GetLastMsgForSubject(ctx, subj)
	if err != nil {
		return false
	}
	var ev NodeEvent
	if json.Unmarshal(m.Data, &ev) != nil {
		return false
	}
	return ev.UID == uid && !ev.Time.Before(e.Time)
}

// writeView writes the cluster's view when it changed.
func (t *term) writeView(ctx context.Context) error {
	v := ClusterView{Cluster: t.c.member.Name, Holder: t.c.s.holder, Reachable: t.reachable, Paused: t.pausedWhy, Breakers: t.breakers.List()}
	b, _ := json.Marshal(v)
	if bytes.Equal(b, t.view) {
		return nil
	}
	v.Time = time.Now().UTC()
	out, _ := json.Marshal(v)
	if _, err := t.c.s.kv.Put(ctx, StatusKey(t.c.member.Name), out); err != nil {
		return err
	}
	t.view = b
	return nil
}

func (t *term) ensureLimiter(p Policy) {
	want := [2]float64{float64(p.ActionEvery), float64(p.ActionBurst)}
	if t.limiter != nil && t.limitFor == want {
		return
	}
	t.limiter = rate.NewLimiter(rate.Every(p.ActionEvery.D()), p.ActionBurst)
	t.limitFor = want
}

// unhealthy reports whether a condition of n is in an unhealthy status,
// and names it ("Ready=False").
func unhealthy(n *corev1.Node, conds []Condition) (bool, string) {
	for _, c := range conds {
		// A missing condition is not a signal: a node starting up has
		// none yet.
		for _, nc := range n.Status.Conditions {
			if nc.Type != c.Type || !slices.Contains(c.Statuses, nc.Status) {
				continue
			}
			return true, string(c.Type) + "=" + string(nc.Status)
		}
	}
	return false, ""
}

func decodeStrict(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

// ref names the node in the disruption ledger.
func (s *NodeState) ref() disruption.NodeRef {
	return disruption.NodeRef{Cluster: s.Cluster, Pool: s.Pool, Name: s.Node, UID: s.UID}
}

// informerClient is the client the informers list and watch with.
func (c *cluster) informerClient() kubernetes.Interface {
	if c.watchCS != nil {
		return c.watchCS
	}
	return c.cs
}
