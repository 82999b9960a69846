package aggregator

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"atoll.dev/libs/api"
)

func usagePod(name, node string, phase corev1.PodPhase, cpu int64) *podView {
	return &podView{Name: name, Node: intern(node), Phase: intern(string(phase)), Requests: api.Quantities{MilliCPU: cpu, MemoryBytes: cpu << 20}}
}

func TestNodeUsage(t *testing.T) {
	bound := usagePod("a", "n1", corev1.PodRunning, 100)
	for _, tc := range []struct {
		name   string
		events func(h cache.ResourceEventHandler)
		want   map[string]nodeLoad
	}{
		{"added", func(h cache.ResourceEventHandler) {
			h.OnAdd(bound, true)
			h.OnAdd(usagePod("b", "n1", corev1.PodPending, 50), false)
		}, map[string]nodeLoad{"n1": {Requested: api.Quantities{MilliCPU: 150, MemoryBytes: 150 << 20}, Pods: 2}}},
		{"not bound yet, then bound", func(h cache.ResourceEventHandler) {
			p := usagePod("a", "", corev1.PodPending, 100)
			h.OnAdd(p, false)
			h.OnUpdate(p, bound)
		}, map[string]nodeLoad{"n1": {Requested: api.Quantities{MilliCPU: 100, MemoryBytes: 100 << 20}, Pods: 1}}},
		{"succeeded gives back", func(h cache.ResourceEventHandler) {
			h.OnAdd(bound, false)
			h.OnUpdate(bound, usagePod("a", "n1", corev1.PodSucceeded, 100))
		}, map[string]nodeLoad{}},
		{"deleted", func(h cache.ResourceEventHandler) {
			h.OnAdd(bound, false)
			h.OnDelete(bound)
		}, map[string]nodeLoad{}},
		{"deleted, as a tombstone", func(h cache.ResourceEventHandler) {
			h.OnAdd(bound, false)
			h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/a", Obj: bound})
		}, map[string]nodeLoad{}},
		{"failed pod deleted takes nothing out", func(h cache.ResourceEventHandler) {
			h.OnAdd(bound, false)
			failed := usagePod("b", "n1", corev1.PodFailed, 70)
			h.OnAdd(failed, false)
			h.OnDelete(failed)
		}, map[string]nodeLoad{"n1": {Requested: api.Quantities{MilliCPU: 100, MemoryBytes: 100 << 20}, Pods: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newNodeUsage()
			tc.events(u.handler())
			if diff := cmp.Diff(tc.want, u.nodes); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

// TestNodeUsageMatchesRecount: after any sequence of adds, updates and
// deletes, the kept figures are what summing the pods held would give
// (what pools computed before, on every probe).
func TestNodeUsageMatchesRecount(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	u := newNodeUsage()
	h := u.handler()
	held := map[string]*podView{}
	phases := []corev1.PodPhase{corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed}
	random := func(name string) *podView {
		node := ""
		if rng.IntN(5) > 0 {
			node = fmt.Sprintf("n%d", rng.IntN(7))
		}
		return usagePod(name, node, phases[rng.IntN(len(phases))], int64(rng.IntN(1000)))
	}
	for range 20000 {
		name := fmt.Sprintf("p%d", rng.IntN(300))
		old, ok := held[name]
		switch {
		case !ok:
			p := random(name)
			held[name] = p
			h.OnAdd(p, false)
		case rng.IntN(3) == 0:
			delete(held, name)
			h.OnDelete(old)
		default:
			p := random(name)
			held[name] = p
			h.OnUpdate(old, p)
		}
	}
	want := map[string]nodeLoad{}
	for _, p := range held {
		if _, node, ok := holding(p); ok {
			l := want[node]
			l.Requested.MilliCPU += p.Requests.MilliCPU
			l.Requested.MemoryBytes += p.Requests.MemoryBytes
			l.Pods++
			want[node] = l
		}
	}
	if diff := cmp.Diff(want, u.nodes); diff != "" {
		t.Errorf("(-recount +kept)\n%s", diff)
	}
}

func TestSlimEvent(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC))
	full := func(ns string) *corev1.Event {
		return &corev1.Event{
			ObjectMeta: metav1.ObjectMeta{Name: "web.1", Namespace: ns, UID: "u1", ResourceVersion: "7", CreationTimestamp: at,
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-scheduler"}}, Annotations: map[string]string{"a": "b"}},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "web-1", UID: "p1", FieldPath: "spec.containers{web}"},
			Type:           "Warning", Reason: "BackOff", Message: "Back-off restarting failed container", LastTimestamp: at,
			Source: corev1.EventSource{Component: "kubelet", Host: "n1"}, Count: 3, ReportingController: "kubelet",
		}
	}
	for _, tc := range []struct {
		name string
		in   *corev1.Event
		want *corev1.Event
	}{
		{"a platform namespace's: what onEvent reads", full("atoll-p1"), &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: "web.1", Namespace: "atoll-p1", UID: "u1", ResourceVersion: "7", CreationTimestamp: at},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "atoll-p1", Name: "web-1"},
			Type:           "Warning", Reason: "BackOff", Message: "Back-off restarting failed container", LastTimestamp: at,
		}},
		{"another namespace's: its name only", full("tenant"), &corev1.Event{
			ObjectMeta: metav1.ObjectMeta{Name: "web.1", Namespace: "tenant", UID: "u1", ResourceVersion: "7"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := slimEvent(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "ns/x"}
	if got, _ := slimEvent(tomb); got != tomb {
		t.Errorf("a tombstone passes unchanged, got %v", got)
	}
}
