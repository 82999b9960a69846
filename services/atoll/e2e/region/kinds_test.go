package region_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/api/apitest"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/e2e/busclient"
	"atoll.dev/services/atoll/region"
)

func TestJobSetSplitsIndexRangesAndSucceeds(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	doc := []byte(`{"apiVersion":"atoll.dev/v1","kind":"JobSet","metadata":{"project":"batch","name":"render"},
"spec":{"parallelism":6,"completions":30,"template":{"containers":[{"name":"work","image":"busybox","command":["sh","-c","render $JOB_COMPLETION_INDEX"]}]}}}`)
	if _, err := cl.Submit(ctx, doc); err != nil {
		t.Fatal(err)
	}
	key := api.Key("batch", api.KindJobSet, "render")
	var p *api.PlacementDecision
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var err error
		if p, err = cl.Placement(ctx, key); err != nil || p == nil || len(p.Shards) == 0 {
			ct.Errorf("no placement: %+v %v", p, err)
		}
	}, 30*time.Second, 250*time.Millisecond)
	// Disjoint ranges that cover 0..29, one per cluster.
	covered := make([]int, 30)
	for _, sh := range p.Shards {
		for i := sh.IndexStart; i < sh.IndexEnd; i++ {
			covered[i]++
		}
	}
	for i, n := range covered {
		if n != 1 {
			t.Errorf("index %d covered %d times", i, n)
		}
	}
	if len(p.Shards) != 3 {
		t.Errorf("%d shards, want one per cluster", len(p.Shards))
	}
	// Each cluster's Indexed Job is told its range.
	for _, sh := range p.Shards {
		c := reg.Env.Cluster(sh.Cluster)
		var j *batchv1.Job
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			var err error
			j, err = c.Client.BatchV1().Jobs(api.Namespace("batch")).Get(ctx, "render", metav1.GetOptions{})
			assert.NoError(ct, err)
		}, 30*time.Second, 250*time.Millisecond)
		if got, want := j.Annotations[api.AnnoIndexRange], fmt.Sprintf("%d-%d", sh.IndexStart, sh.IndexEnd-1); got != want {
			t.Errorf("%s: index range %q, want %q", sh.Cluster, got, want)
		}
		if *j.Spec.Completions != sh.IndexEnd-sh.IndexStart || *j.Spec.CompletionMode != "Indexed" {
			t.Errorf("%s: completions %d mode %s", sh.Cluster, *j.Spec.Completions, *j.Spec.CompletionMode)
		}
		env := map[string]string{}
		for _, e := range j.Spec.Template.Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		if env["ATOLL_INDEX_START"] != fmt.Sprint(sh.IndexStart) || env["ATOLL_INDEX_END"] != fmt.Sprint(sh.IndexEnd) {
			t.Errorf("%s: env %v", sh.Cluster, env)
		}
	}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		st, err := cl.Status(ctx, key)
		if err != nil || st == nil {
			ct.Errorf("no status: %v", err)
			return
		}
		if st.Phase != api.PhaseSucceeded || st.Succeeded != 30 {
			ct.Errorf("phase %s, %d/30 succeeded", st.Phase, st.Succeeded)
		}
	}, 120*time.Second, 250*time.Millisecond)
}

func gpuPodDoc(name string) []byte {
	return []byte(fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"Pod","metadata":{"project":"ml","name":%q},
"spec":{"placement":{"hardware":{"gpus":1,"gpuType":"a100"}},"template":{"containers":[{"name":"nb","image":"jupyter"}]}}}`, name))
}

func TestGPUPodWaitsForGPUsThenLandsWhereTheyAre(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	if _, err := cl.Submit(ctx, gpuPodDoc("notebook")); err != nil {
		t.Fatal(err)
	}
	key := api.Key("ml", api.KindPod, "notebook")
	// No GPU anywhere: Unschedulable, and the status says why per cluster.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		st, err := cl.Status(ctx, key)
		if err != nil || st == nil {
			ct.Errorf("no status: %v", err)
			return
		}
		if st.Phase != api.PhaseUnscheduled {
			ct.Errorf("phase %s, want Unschedulable", st.Phase)
			return
		}
		var clusters []string
		for _, r := range st.Reasons {
			if r.Filter == "Hardware" && strings.Contains(r.Reason, "a100") {
				clusters = append(clusters, r.Cluster)
			}
		}
		slices.Sort(clusters)
		if !slices.Equal(clusters, []string{"zone-a", "zone-b", "zone-c"}) {
			ct.Errorf("hardware reasons for %v (%+v)", clusters, st.Reasons)
		}
	}, 30*time.Second, 250*time.Millisecond)
	for _, c := range reg.Env.Clusters {
		if _, err := c.Client.CoreV1().Pods(api.Namespace("ml")).Get(ctx, "notebook", metav1.GetOptions{}); err == nil {
			t.Errorf("%s runs the pod before any GPU exists", c.Name)
		}
	}
	// GPU nodes arrive in zone b only: the pod lands there and runs.
	if _, err := reg.Env.Cluster("zone-b").AddNodes(ctx, region.GPUPool()); err != nil {
		t.Fatal(err)
	}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		st, err := cl.Status(ctx, key)
		if err != nil || st == nil || st.Phase != api.PhaseRunning {
			ct.Errorf("status %+v %v", st, err)
		}
	}, 60*time.Second, 250*time.Millisecond)
	for _, c := range reg.Env.Clusters {
		p, err := c.Client.CoreV1().Pods(api.Namespace("ml")).Get(ctx, "notebook", metav1.GetOptions{})
		switch {
		case c.Name == "zone-b" && err != nil:
			t.Errorf("pod not in zone-b: %v", err)
		case c.Name == "zone-b":
			node, _ := c.Client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
			if node == nil || node.Labels[api.NodeLabelGPU] != "a100" {
				t.Errorf("pod on node %q, not a GPU node", p.Spec.NodeName)
			}
		case err == nil:
			t.Errorf("pod also in %s, which has no GPUs", c.Name)
		}
	}
}

func TestQuotaAdmitsExactlyWhatFits(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	const project = "quota-team"
	// Each App: 1 replica of 1 CPU plus the 10m log shipper: 1010m. 20 fit.
	if err := cl.SetQuota(ctx, project, api.TierOnDemand, api.Limit{MilliCPU: new(int64(20 * 1010))}); err != nil {
		t.Fatal(err)
	}
	doc := func(i int) []byte {
		return []byte(fmt.Sprintf(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":"svc-%d"},
"spec":{"replicas":1,"template":{"containers":[{"name":"a","image":"nginx","resources":{"requests":{"cpu":"1","memory":"64Mi"}}}]}}}`, project, i))
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var admitted []int
	var rejections []*busclient.Error
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := cl.Submit(ctx, doc(i))
			mu.Lock()
			defer mu.Unlock()
			var e *busclient.Error
			switch {
			case err == nil:
				admitted = append(admitted, i)
			case errors.As(err, &e):
				rejections = append(rejections, e)
			default:
				t.Errorf("submit %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if len(admitted) != 20 || len(rejections) != 30 {
		t.Fatalf("%d admitted, %d rejected; want 20, 30", len(admitted), len(rejections))
	}
	for _, e := range rejections {
		q := e.Body.Quota
		if e.Status != 409 || e.Body.Code != "QuotaExceeded" || q == nil || q.Tier != api.TierOnDemand || q.Resource != "cpu" ||
			q.Limit != 20200 || q.Requested != 1010 || q.Used+q.Requested <= q.Limit {
			t.Errorf("rejection %d %+v %+v", e.Status, e.Body, q)
		}
	}
	l, err := cl.Quota(ctx, project)
	if err != nil {
		t.Fatal(err)
	}
	if u := l.Used(api.TierOnDemand); u.MilliCPU != 20200 || u.Pods != 20 {
		t.Errorf("usage %+v after admitting 20", u)
	}
	for _, i := range admitted {
		if err := cl.Delete(ctx, project, api.KindApp, fmt.Sprintf("svc-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	l, _ = cl.Quota(ctx, project)
	if u := l.Used(api.TierOnDemand); u.MilliCPU != 0 || u.Pods != 0 || u.MemoryBytes != 0 {
		t.Errorf("usage %+v after deleting everything, want zero", u)
	}
}

func TestBadSpecsEndToEnd(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	for _, tc := range apitest.BadSpecs {
		_, err := cl.Submit(ctx, []byte(tc.Doc))
		var e *busclient.Error
		if !errors.As(err, &e) {
			t.Errorf("%s: got %v, want a rejection", tc.Name, err)
			continue
		}
		found := false
		for _, f := range e.Body.Fields {
			found = found || f.Field == tc.Field && f.Code == tc.Code && f.Reason != ""
		}
		if !found {
			t.Errorf("%s: fields %+v lack %s/%s", tc.Name, e.Body.Fields, tc.Field, tc.Code)
		}
	}
	// Nothing was written for any of them.
	for _, name := range []string{"w", "j", "Web_1"} {
		for _, kind := range []string{api.KindApp, api.KindJobSet, api.KindPod} {
			if w, _ := cl.Workload(ctx, api.Key("p", kind, name)); w != nil {
				t.Errorf("rejected workload %s stored", w)
			}
		}
	}
}
