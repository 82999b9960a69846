package remediation

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/disruption"
	"atoll.dev/libs/testenv"
	rem "atoll.dev/services/remediation"
)

// basePolicy is the tests' policy: durations of seconds. MaxUnhealthy
// 30% of 5 nodes allows one (1.5 rounds down), so two NotReady (40%)
// open a breaker.
func basePolicy() rem.Policy {
	s := rem.Steps{
		Conditions: []rem.Condition{
			{Type: corev1.NodeReady, Statuses: []corev1.ConditionStatus{corev1.ConditionFalse, corev1.ConditionUnknown}, For: rem.Duration(3 * time.Second)},
			// As a node-problem-detector would set it; unlike Ready=False it
			// leaves the node's pods ready, so their budgets apply in full.
			{Type: "KernelDeadlock", Statuses: []corev1.ConditionStatus{corev1.ConditionTrue}, For: rem.Duration(3 * time.Second)},
		},
		DrainRetry: rem.Duration(time.Second), DrainRetryMax: rem.Duration(4 * time.Second),
		DrainDeadline: rem.Duration(time.Minute), DrainPolicy: rem.DrainStop,
		PodGracePeriod: ptr.To(rem.Duration(time.Second)), SkipWaitForDelete: rem.Duration(3 * time.Second),
		ReplaceTimeout: rem.Duration(time.Minute), ReplaceAttempts: 2,
	}
	return rem.Policy{Steps: s, FlapTransitions: 4, FlapWindow: rem.Duration(time.Minute),
		MaxUnhealthy: "30%", Cooldown: rem.Duration(10 * time.Second),
		ActionEvery: rem.Duration(2 * time.Second), ActionBurst: 1,
		Budget: disruption.Budget{Pool: "2", Cluster: "2"}, LeaseTTL: rem.Duration(2 * time.Minute)}
}

func setPolicy(t *testing.T, p rem.Policy) {
	t.Helper()
	ctx := context.Background()
	kv, err := reg.Bus.KV(ctx, bus.BucketRemediation)
	require.NoError(t, err)
	b, err := json.Marshal(p)
	require.NoError(t, err)
	_, err = kv.Put(ctx, rem.KeyPolicy, b)
	require.NoError(t, err)
}

func member(t *testing.T, name string) *testenv.Cluster {
	t.Helper()
	c := reg.Env.Cluster(name)
	require.NotNil(t, c, name)
	return c
}

// setCondition sets a node condition's status, as a kubelet or a
// node-problem-detector would.
func setCondition(t *testing.T, cs kubernetes.Interface, node string, typ corev1.NodeConditionType, status corev1.ConditionStatus) {
	t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		found := false
		for i := range n.Status.Conditions {
			c := &n.Status.Conditions[i]
			if c.Type == typ {
				found = true
				if c.Status != status {
					c.Status, c.LastTransitionTime = status, now
				}
				c.LastHeartbeatTime, c.Reason = now, "AtollTest"
			}
		}
		if !found {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: typ, Status: status, Reason: "AtollTest", LastTransitionTime: now, LastHeartbeatTime: now})
		}
		_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return
	}
	require.NoError(t, err, "set %s=%s on %s", typ, status, node)
}

// breakNode makes a node report Ready=False, as a kubelet whose runtime
// is down does. KWOK's node-initialize stage sets Ready back to True at
// once on any node whose Ready conditions are all other than True (a
// jq NotIn over every Ready entry), so the status also carries a second,
// later Ready entry that is True: Kubernetes (the node lifecycle
// controller) and the remediation service read the first one, False,
// and KWOK leaves the node alone. KWOK still runs the node's pods, so
// evictions complete as on a live kubelet.
func breakNode(t *testing.T, cs kubernetes.Interface, node string) {
	t.Helper()
	require.NoError(t, testenv.BreakNode(context.Background(), cs, node))
}

// healNode makes the node Ready again: one Ready entry, True.
func healNode(t *testing.T, cs kubernetes.Interface, node string) {
	t.Helper()
	updateStatus(t, cs, node, func(n *corev1.Node) {
		now := metav1.Now()
		conds := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}
		for _, c := range n.Status.Conditions {
			if c.Type != corev1.NodeReady {
				conds = append(conds, c)
			}
		}
		n.Status.Conditions = conds
	})
}

func updateStatus(t *testing.T, cs kubernetes.Interface, node string, fn func(*corev1.Node)) {
	t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		fn(n)
		_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return
	}
	require.NoError(t, err, "update status of %s", node)
}

// healAll makes every node of a cluster Ready, without KernelDeadlock,
// and uncordoned, once the test is over.
func healAll(t *testing.T, cluster string) {
	t.Helper()
	c := member(t, cluster)
	t.Cleanup(func() {
		ctx := context.Background()
		list, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Logf("heal %s: %v", cluster, err)
			return
		}
		for _, n := range list.Items {
			healNode(t, c.Client, n.Name)
			setCondition(t, c.Client, n.Name, "KernelDeadlock", corev1.ConditionFalse)
			if n.Spec.Unschedulable {
				patch := []byte(`{"spec":{"unschedulable":false},"metadata":{"annotations":{"` + rem.AnnoCordonedBy + `":null}}}`)
				_, _ = c.Client.CoreV1().Nodes().Patch(ctx, n.Name, "application/strategic-merge-patch+json", patch, metav1.PatchOptions{})
			}
		}
	})
}

// events records the node events of a cluster, in arrival order.
type events struct {
	mu  sync.Mutex
	all []rem.NodeEvent
	sub *nats.Subscription
}

func watchEvents(t *testing.T, cluster string) *events {
	t.Helper()
	e := &events{}
	sub, err := reg.Bus.NC.Subscribe(bus.NodeSubject(cluster, "*", "*"), func(m *nats.Msg) {
		var ev rem.NodeEvent
		if json.Unmarshal(m.Data, &ev) == nil {
			e.mu.Lock()
			e.all = append(e.all, ev)
			e.mu.Unlock()
		}
	})
	require.NoError(t, err)
	require.NoError(t, reg.Bus.NC.Flush())
	e.sub = sub
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return e
}

// of lists the events of one node (by name), deduplicated by sequence.
func (e *events) of(node string) []rem.NodeEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []rem.NodeEvent
	seen := map[string]bool{}
	for _, ev := range e.all {
		k := fmt.Sprintf("%s/%d", ev.UID, ev.Seq)
		if ev.Node == node && !seen[k] {
			seen[k] = true
			out = append(out, ev)
		}
	}
	return out
}

func names(evs []rem.NodeEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Event)
	}
	return out
}

func (e *events) has(node, event string) (rem.NodeEvent, bool) {
	for _, ev := range e.of(node) {
		if ev.Event == event {
			return ev, true
		}
	}
	return rem.NodeEvent{}, false
}

// status asks the remediation service for a cluster's status, as the
// gateway would.
func status(t require.TestingT, cluster string) rem.ClusterStatus {
	body, _ := json.Marshal(rem.StatusRequest{Cluster: cluster})
	msg, err := gwBus.NC.Request(bus.RemediationStatus.Subject(), body, 5*time.Second)
	require.NoError(t, err)
	var out []rem.ClusterStatus
	require.NoError(t, json.Unmarshal(msg.Data, &out), string(msg.Data))
	require.Len(t, out, 1, string(msg.Data))
	return out[0]
}

func nodeState(st rem.ClusterStatus, node string) (rem.NodeState, bool) {
	for _, n := range st.Nodes {
		if n.Node == node {
			return n, true
		}
	}
	return rem.NodeState{}, false
}

func appDoc(project, name string, replicas int, zone string, availability string) []byte {
	return []byte(fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":%q},
"spec":{"replicas":%d,"placement":{"zones":[%q]},"availability":%s,
"template":{"containers":[{"name":"web","image":"nginx","resources":{"requests":{"cpu":"100m","memory":"64Mi"}}}]}}}`,
		project, name, replicas, zone, availability))
}

// runApp submits an App and waits until all its replicas are ready.
func runApp(t *testing.T, doc []byte, key string, replicas int32) {
	t.Helper()
	ctx := context.Background()
	_, err := cl.Apply(ctx, doc)
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		st, err := cl.Status(ctx, key)
		if !assert.NoError(ct, err) || !assert.NotNil(ct, st) {
			return
		}
		assert.Equal(ct, api.PhaseRunning, st.Phase)
		assert.Equal(ct, replicas, st.Ready)
	}, 90*time.Second, 250*time.Millisecond)
}

// podsOf lists the running pods of a workload in a cluster, by node.
func podsOf(t require.TestingT, cs kubernetes.Interface, project, name string) map[string][]corev1.Pod {
	list, err := cs.CoreV1().Pods(api.Namespace(project)).List(context.Background(), metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + name})
	require.NoError(t, err)
	out := map[string][]corev1.Pod{}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
			out[p.Spec.NodeName] = append(out[p.Spec.NodeName], p)
		}
	}
	return out
}

// readyPods counts a workload's ready pods in a cluster.
func readyPods(cs kubernetes.Interface, project, name string) (int, error) {
	list, err := cs.CoreV1().Pods(api.Namespace(project)).List(context.Background(), metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + name})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				n++
			}
		}
	}
	return n, nil
}

// minReady samples a workload's ready pods every 100ms until stop, and
// returns the lowest count seen.
func minReady(cs kubernetes.Interface, project, name string) (stop func() int) {
	done := make(chan struct{})
	out := make(chan int, 1)
	go func() {
		low := -1
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if n, err := readyPods(cs, project, name); err == nil && (low < 0 || n < low) {
				low = n
			}
			select {
			case <-done:
				out <- low
				return
			case <-tick.C:
			}
		}
	}()
	return func() int { close(done); return <-out }
}

// nodesOfPool lists a pool's nodes by name.
func nodesOfPool(t require.TestingT, cs kubernetes.Interface, pool string) []corev1.Node {
	list, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: testenv.LabelPool + "=" + pool})
	require.NoError(t, err)
	slices.SortFunc(list.Items, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	return list.Items
}

func isReady(n corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
