package region_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/services/atoll/e2e"
)

// waitStatus waits until the status of key is of generation gen, in
// phase, with ready pods per zone as in zones (nil: any).
func waitStatus(t *testing.T, key string, gen int64, phase string, zones map[string]int32) *api.Status {
	t.Helper()
	var st *api.Status
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var err error
		if st, err = cl.Status(context.Background(), key); err != nil || st == nil {
			ct.Errorf("no status yet: %v", err)
			return
		}
		got := map[string]int32{}
		for z, zs := range st.Zones {
			if zs.Ready > 0 || zs.Desired > 0 {
				got[z] = zs.Ready
			}
		}
		if st.Generation != gen || st.Phase != phase || zones != nil && fmt.Sprint(got) != fmt.Sprint(zones) {
			ct.Errorf("generation %d phase %s ready per zone %v; want %d %s %v", st.Generation, st.Phase, got, gen, phase, zones)
		}
	}, 90*time.Second, 250*time.Millisecond)
	return st
}

// podUIDs lists the live (not terminating) pods of a workload in every
// cluster; t is a test or the *assert.CollectT of a poll.
func podUIDs(t require.TestingT, project, name string) []string {
	var out []string
	for _, c := range reg.Env.Clusters {
		pods, err := c.Client.CoreV1().Pods(api.Namespace(project)).List(context.Background(), metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + name})
		require.NoError(t, err, "%s: list the pods of %s", c.Name, name)
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				out = append(out, string(p.UID))
			}
		}
	}
	return out
}

// eachDeployment checks every member cluster's Deployment of a workload.
func eachDeployment(ctx context.Context, project, name string, check func(cluster string, replicas int32, status int32, annotations map[string]string) error) error {
	for _, c := range reg.Env.Clusters {
		d, err := c.Client.AppsV1().Deployments(api.Namespace(project)).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("%s: %w", c.Name, err)
		}
		if err := check(c.Name, *d.Spec.Replicas, d.Status.Replicas, d.Spec.Template.Annotations); err != nil {
			return fmt.Errorf("%s: %w", c.Name, err)
		}
	}
	return nil
}

func TestOperationsOnAnApp(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	const project, name = "ops-team", "api"
	key := api.Key(project, api.KindApp, name)
	op := func(o string) api.Operation {
		return api.Operation{Project: project, Kind: api.KindApp, Name: name, Op: o}
	}
	do := func(o api.Operation) *api.Workload {
		t.Helper()
		w, err := cl.Operate(ctx, o)
		if err != nil {
			t.Fatalf("%s: %v", o.Op, err)
		}
		return w
	}
	w, err := cl.Submit(ctx, appDoc(project, name, 3, "nginx:1.27"))
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, key, w.Metadata.Generation, api.PhaseRunning, map[string]int32{"a": 1, "b": 1, "c": 1})

	// Pause: the Deployments stay, held at zero; the quota stays held.
	w = do(op(api.OpPause))
	waitStatus(t, key, w.Metadata.Generation, api.PhasePaused, map[string]int32{})
	if err := eachDeployment(ctx, project, name, func(_ string, replicas, status int32, _ map[string]string) error {
		if replicas != 0 || status != 0 {
			return fmt.Errorf("replicas %d (status %d), want 0 while paused", replicas, status)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	if pods := podUIDs(t, project, name); len(pods) != 0 {
		t.Errorf("%d pods left while paused", len(pods))
	}
	if l, err := cl.Quota(ctx, project); err != nil || l.Used(api.TierOnDemand).Pods != 3 {
		t.Errorf("quota while paused: %+v %v, want 3 pods held", l, err)
	}

	// Resume: Running 3 again.
	w = do(op(api.OpResume))
	waitStatus(t, key, w.Metadata.Generation, api.PhaseRunning, map[string]int32{"a": 1, "b": 1, "c": 1})

	// Restart: the pod template's annotation changes and every pod is replaced.
	before := podUIDs(t, project, name)
	w = do(op(api.OpRestart))
	stamp := w.Control.RestartedAt.UTC().Format(time.RFC3339Nano)
	waitStatus(t, key, w.Metadata.Generation, api.PhaseRunning, map[string]int32{"a": 1, "b": 1, "c": 1})
	if err := eachDeployment(ctx, project, name, func(_ string, _, _ int32, a map[string]string) error {
		if a[api.AnnoRestartedAt] != stamp {
			return fmt.Errorf("template annotations %v, want %s=%s", a, api.AnnoRestartedAt, stamp)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		after := podUIDs(ct, project, name)
		for _, uid := range after {
			if slices.Contains(before, uid) {
				ct.Errorf("pod %s survived the restart", uid)
				return
			}
		}
		if len(after) != 3 {
			ct.Errorf("%d pods, want 3", len(after))
		}
	}, 60*time.Second, 250*time.Millisecond)

	// Restart one container: its own annotation, and the pods roll.
	before = podUIDs(t, project, name)
	rc := op(api.OpRestartContainer)
	rc.Container = "web"
	w = do(rc)
	want := w.Control.ContainerRestarts["web"].UTC().Format(time.RFC3339Nano)
	waitStatus(t, key, w.Metadata.Generation, api.PhaseRunning, map[string]int32{"a": 1, "b": 1, "c": 1})
	if err := eachDeployment(ctx, project, name, func(_ string, _, _ int32, a map[string]string) error {
		if a["atoll.dev/restart.web"] != want || a[api.AnnoRestartedAt] != stamp {
			return fmt.Errorf("template annotations %v, want atoll.dev/restart.web=%s beside the earlier restart", a, want)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		for _, uid := range podUIDs(ct, project, name) {
			if slices.Contains(before, uid) {
				ct.Errorf("pod %s survived the container restart", uid)
				return
			}
		}
	}, 60*time.Second, 250*time.Millisecond)

	// Scale to 6, quota held exactly.
	sc := op(api.OpScale)
	six := int32(6)
	sc.Replicas = &six
	w = do(sc)
	waitStatus(t, key, w.Metadata.Generation, api.PhaseRunning, map[string]int32{"a": 2, "b": 2, "c": 2})
	if l, err := cl.Quota(ctx, project); err != nil || l.Used(api.TierOnDemand).Pods != 6 {
		t.Errorf("quota after scale: %+v %v, want 6 pods held", l, err)
	}

	// Stop: nothing left in any cluster, quota released.
	w = do(op(api.OpStop))
	waitStatus(t, key, w.Metadata.Generation, api.PhaseStopped, map[string]int32{})
	for _, c := range reg.Env.Clusters {
		ns := api.Namespace(project)
		sel := metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + name}
		d, _ := c.Client.AppsV1().Deployments(ns).List(ctx, sel)
		p, _ := c.Client.CoreV1().Pods(ns).List(ctx, sel)
		if len(d.Items) > 0 || len(p.Items) > 0 {
			t.Errorf("%s keeps %d deployments, %d pods of a stopped App", c.Name, len(d.Items), len(p.Items))
		}
	}
	if l, err := cl.Quota(ctx, project); err != nil || l.Used(api.TierOnDemand) != (api.Demand{Tier: api.TierOnDemand}) {
		t.Errorf("quota while stopped: %+v %v, want nothing held", l.Used(api.TierOnDemand), err)
	}

	// Start: placed and Running again, at the scaled size.
	w = do(op(api.OpStart))
	waitStatus(t, key, w.Metadata.Generation, api.PhaseRunning, map[string]int32{"a": 2, "b": 2, "c": 2})
	if l, err := cl.Quota(ctx, project); err != nil || l.Used(api.TierOnDemand).Pods != 6 {
		t.Errorf("quota after start: %+v %v, want 6 pods held", l, err)
	}
	if err := cl.Delete(ctx, project, api.KindApp, name); err != nil {
		t.Fatal(err)
	}
}

func TestOperationsPauseAJobSet(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	const project, name = "ops-batch", "crunch"
	key := api.Key(project, api.KindJobSet, name)
	// Many indexes, one pod at a time per cluster: it runs long enough to pause.
	doc := []byte(fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"JobSet","metadata":{"project":%q,"name":%q},
"spec":{"parallelism":3,"completions":3000,"template":{"containers":[{"name":"work","image":"busybox"}]}}}`, project, name))
	w, err := cl.Submit(ctx, doc)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cl.Delete(context.Background(), project, api.KindJobSet, name) }()
	waitStatus(t, key, w.Metadata.Generation, api.PhaseRunning, nil)

	w, err = cl.Operate(ctx, api.Operation{Project: project, Kind: api.KindJobSet, Name: name, Op: api.OpPause})
	if err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, key, w.Metadata.Generation, api.PhasePaused, nil)
	jobs := func(check func(j *batchv1.Job) error) error {
		for _, c := range reg.Env.Clusters {
			j, err := c.Client.BatchV1().Jobs(api.Namespace(project)).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("%s: %w", c.Name, err)
			}
			if err := check(j); err != nil {
				return fmt.Errorf("%s: %w", c.Name, err)
			}
		}
		return nil
	}
	if err := jobs(func(j *batchv1.Job) error {
		if j.Spec.Suspend == nil || !*j.Spec.Suspend || j.Status.Active != 0 {
			return fmt.Errorf("suspend %v active %d, want a suspended Job", j.Spec.Suspend, j.Status.Active)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	if st.Succeeded >= 3000 || st.Running != 0 {
		t.Errorf("paused status: %d succeeded, %d running", st.Succeeded, st.Running)
	}

	// Resume: the Jobs run again and make progress from where they were.
	w, err = cl.Operate(ctx, api.Operation{Project: project, Kind: api.KindJobSet, Name: name, Op: api.OpResume})
	if err != nil {
		t.Fatal(err)
	}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		err := jobs(func(j *batchv1.Job) error {
			if j.Spec.Suspend != nil && *j.Spec.Suspend {
				return fmt.Errorf("still suspended")
			}
			return nil
		})
		if !assert.NoError(ct, err) {
			return
		}
		now, err := cl.Status(ctx, key)
		if err != nil || now == nil || now.Generation != w.Metadata.Generation || now.Succeeded <= st.Succeeded {
			ct.Errorf("status %+v %v: no progress past %d since the resume", now, err, st.Succeeded)
		}
	}, 60*time.Second, 250*time.Millisecond)
}

func TestOperationsRestartAPod(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	const project, name = "ops-pods", "box"
	key := api.Key(project, api.KindPod, name)
	w, err := cl.Submit(ctx, []byte(fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"Pod","metadata":{"project":%q,"name":%q},
"spec":{"template":{"containers":[{"name":"sh","image":"busybox"}]}}}`, project, name)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cl.Delete(context.Background(), project, api.KindPod, name) }()
	waitStatus(t, key, w.Metadata.Generation, api.PhaseRunning, nil)
	before := podUIDs(t, project, name)
	if len(before) != 1 {
		t.Fatalf("pods %v, want 1", before)
	}
	// A Pod cannot pause.
	if _, err := cl.Operate(ctx, api.Operation{Project: project, Kind: api.KindPod, Name: name, Op: api.OpPause}); err == nil {
		t.Error("a Pod was paused")
	}
	w, err = cl.Operate(ctx, api.Operation{Project: project, Kind: api.KindPod, Name: name, Op: api.OpRestart})
	if err != nil {
		t.Fatal(err)
	}
	stamp := w.Control.RestartedAt.UTC().Format(time.RFC3339Nano)
	waitStatus(t, key, w.Metadata.Generation, api.PhaseRunning, nil)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		for _, c := range reg.Env.Clusters {
			p, err := c.Client.CoreV1().Pods(api.Namespace(project)).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			if string(p.UID) == before[0] || p.Annotations[api.AnnoRestartedAt] != stamp || p.Status.Phase != corev1.PodRunning {
				ct.Errorf("%s: pod %s annotations %v phase %s; want a new Running pod restarted at %s", c.Name, p.UID, p.Annotations, p.Status.Phase, stamp)
				return
			}
			return
		}
		ct.Errorf("no pod")
	}, 60*time.Second, 250*time.Millisecond)
}
