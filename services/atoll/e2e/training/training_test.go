package training

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/testenv"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/e2e/busclient"
)

// post creates a workload through the gateway and returns the status code
// and body.
func post(t *testing.T, project, doc string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", reg.GatewayURL+"/v1/projects/"+project+"/workloads", strings.NewReader(doc))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+reg.AdminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = io.Copy(&b, resp.Body)
	return resp.StatusCode, b.String()
}

func reader() *busclient.Client { return cl }

// trainingDoc is a TrainingJob of workers whose pods stay Running
// (holdrunning, see testdata/stages.yaml); extra is spliced into its spec.
func trainingDoc(name string, workers int, gpus int, gpuType, extra string) string {
	hw := ""
	if gpus > 0 {
		hw = fmt.Sprintf(`"placement":{"hardware":{"gpuType":%q,"gpus":%d}},`, gpuType, gpus)
	}
	return fmt.Sprintf(`{"kind":"TrainingJob","metadata":{"name":%q},"spec":{%s%s"workers":%d,"tfConfig":true,
"template":{"labels":{"holdrunning":"true"},"containers":[{"name":"trainer","image":"trainer:1",
"resources":{"requests":{"cpu":"100m","memory":"64Mi"}}}]}}}`, name, hw, extra, workers)
}

// gangPods lists a TrainingJob's live pods in one member cluster.
func gangPods(ctx context.Context, c *testenv.Cluster, project, name string) ([]corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pods, err := c.Client.CoreV1().Pods(api.Namespace(project)).List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + name})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

func envOf(c corev1.Container) map[string]corev1.EnvVar {
	out := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		out[e.Name] = e
	}
	return out
}

// expand does what the kubelet does to $(VAR) in an env value.
func expand(v string, vars map[string]string) string {
	for k, val := range vars {
		v = strings.ReplaceAll(v, "$("+k+")", val)
	}
	return v
}

// TestGangOfFourGPUWorkersLandsWholeInTheZoneWithRoom: 4 workers of one
// a100 each fit only in zone-b (2 nodes x 2 GPUs; zone-c has 2 a100s,
// zone-a none): the gang lands there whole, as an Indexed Job and a
// headless Service, every worker Running with its rank, the world size and
// rank 0's address in its environment; the status lists the 4 ranks.
func TestGangOfFourGPUWorkersLandsWholeInTheZoneWithRoom(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	const project, name = "ml", "resnet"
	key := api.Key(project, api.KindTrainingJob, name)
	start := time.Now()
	code, body := post(t, project, trainingDoc(name, 4, 1, "a100", ""))
	require.Equal(t, http.StatusCreated, code, body)

	zb := reg.Env.Cluster("zone-b")
	var pods []corev1.Pod
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p, err := reader().Placement(ctx, key)
		if !assert.NoError(c, err) || !assert.NotNil(c, p) || !assert.Len(c, p.Shards, 1, "reasons: %+v", p.Reasons) {
			return
		}
		assert.Equal(c, "zone-b", p.Shards[0].Cluster)
		assert.EqualValues(c, 4, p.Shards[0].Replicas)
		pods, err = gangPods(ctx, zb, project, name)
		if !assert.NoError(c, err) || !assert.Len(c, pods, 4) {
			return
		}
		for _, p := range pods {
			assert.Equal(c, corev1.PodRunning, p.Status.Phase, p.Name)
		}
		st, err := reader().Status(ctx, key)
		if assert.NoError(c, err) && assert.NotNil(c, st) && assert.NotNil(c, st.Training) {
			assert.Equal(c, api.PhaseRunning, st.Phase)
			assert.Equal(c, "zone-b", st.Training.Cluster)
			assert.Len(c, st.Training.Ranks, 4)
		}
	}, 90*time.Second, 500*time.Millisecond)
	t.Logf("4 workers Running in zone-b %v after create", time.Since(start).Round(time.Millisecond))

	// No worker anywhere else: the gang is never split.
	for _, c := range reg.Env.Clusters {
		if c.Name == "zone-b" {
			continue
		}
		other, err := gangPods(ctx, c, project, name)
		require.NoError(t, err)
		assert.Empty(t, other, "workers in %s", c.Name)
	}

	svc, err := zb.Client.CoreV1().Services(api.Namespace(project)).Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, corev1.ClusterIPNone, svc.Spec.ClusterIP, "a headless Service")
	job, err := zb.Client.BatchV1().Jobs(api.Namespace(project)).Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, job.Spec.CompletionMode)
	assert.Equal(t, batchv1.IndexedCompletion, *job.Spec.CompletionMode)
	assert.EqualValues(t, 4, *job.Spec.Completions)
	assert.EqualValues(t, 4, *job.Spec.Parallelism)

	ranks := map[int]bool{}
	nodes := map[string]bool{}
	for _, p := range pods {
		idx, err := strconv.Atoi(p.Annotations[batchv1.JobCompletionIndexAnnotation])
		require.NoError(t, err, "completion index of %s", p.Name)
		ranks[idx] = true
		nodes[p.Spec.NodeName] = true
		assert.Equal(t, fmt.Sprintf("%s-%d", name, idx), p.Spec.Hostname, "hostname of rank %d", idx)
		assert.Equal(t, name, p.Spec.Subdomain, "subdomain: the headless Service")
		require.Len(t, p.Spec.Containers, 1)
		env := envOf(p.Spec.Containers[0])
		rank := env["RANK"]
		require.NotNil(t, rank.ValueFrom, "RANK comes from the downward API")
		assert.Equal(t, "metadata.annotations['"+batchv1.JobCompletionIndexAnnotation+"']", rank.ValueFrom.FieldRef.FieldPath)
		vars := map[string]string{"RANK": strconv.Itoa(idx)}
		for k, want := range map[string]string{
			"WORLD_SIZE": "4", "MASTER_ADDR": name + "-0." + name, "MASTER_PORT": "29500",
			"PET_NNODES": "4", "PET_NODE_RANK": strconv.Itoa(idx), "PET_MASTER_ADDR": name + "-0." + name, "PET_MASTER_PORT": "29500",
		} {
			assert.Equal(t, want, expand(env[k].Value, vars), "%s of rank %d", k, idx)
		}
		var tf struct {
			Cluster map[string][]string `json:"cluster"`
			Task    struct {
				Type  string `json:"type"`
				Index int    `json:"index"`
			} `json:"task"`
		}
		require.NoError(t, json.Unmarshal([]byte(expand(env["TF_CONFIG"].Value, vars)), &tf), "TF_CONFIG of rank %d", idx)
		assert.Equal(t, idx, tf.Task.Index)
		assert.Len(t, tf.Cluster["worker"], 4)
		assert.Equal(t, name+"-0."+name+":29500", tf.Cluster["worker"][0])
		gpu := p.Spec.Containers[0].Resources.Requests[api.ResourceGPUName]
		assert.EqualValues(t, 1, gpu.Value(), "GPU request of rank %d", idx)
		assert.Equal(t, "a100", p.Spec.NodeSelector[api.NodeLabelGPU])
	}
	assert.Equal(t, map[int]bool{0: true, 1: true, 2: true, 3: true}, ranks, "ranks 0..3, each once")
	assert.Len(t, nodes, 2, "the 4 one-GPU workers fill zone-b's two 2-GPU nodes")
	t.Logf("ranks on nodes %v; env checked on every pod", slices.Sorted(func(yield func(string) bool) {
		for n := range nodes {
			if !yield(n) {
				return
			}
		}
	}))
}

// TestGangThatFitsNowhereStaysPendingWithTheReason: 4 workers of one
// h100 each, where the region has 3 h100 GPUs (zone-a): the gang is never
// split over what there is; it stays pending, and its reason names what
// each cluster fits.
func TestGangThatFitsNowhereStaysPendingWithTheReason(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	const project, name = "ml", "llm"
	key := api.Key(project, api.KindTrainingJob, name)
	code, body := post(t, project, trainingDoc(name, 4, 1, "h100", ""))
	require.Equal(t, http.StatusCreated, code, body)
	var st *api.Status
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		st, err = reader().Status(ctx, key)
		if !assert.NoError(c, err) || !assert.NotNil(c, st) {
			return
		}
		assert.Equal(c, api.PhaseUnscheduled, st.Phase)
		if assert.NotEmpty(c, st.Reasons) {
			assert.Contains(c, st.Reasons[0].Reason, "no cluster fits 4 workers of 1 h100 GPU")
			assert.Contains(c, st.Reasons[0].Reason, "zone-a fits 3")
		}
	}, 60*time.Second, 500*time.Millisecond)
	t.Logf("pending: %s", st.Reasons[0].Reason)
	for _, c := range reg.Env.Clusters {
		pods, err := gangPods(ctx, c, project, name)
		require.NoError(t, err)
		assert.Empty(t, pods, "no worker of the pending gang in %s", c.Name)
	}
}

// TestGangHeldPendingIsTakenDownAndRequeued: a gang whose workers cannot
// be scheduled inside the cluster (a nodeSelector no node has; the
// scheduler's filters do not look at nodes) is not all Running within its
// 5 s ready timeout: it is taken down (no Job, no Service, no pod left),
// its quota returned (the project's usage drops to zero), the events
// gang-timeout and requeued published, and it is placed again, quota
// reserved again, after its backoff.
func TestGangHeldPendingIsTakenDownAndRequeued(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	const project, name = "ml-hold", "stuck"
	key := api.Key(project, api.KindTrainingJob, name)
	sub, err := reader().WatchEvents(project, api.KindTrainingJob, name)
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()

	doc := strings.Replace(trainingDoc(name, 2, 0, "", `"readyTimeoutSeconds":5,"backoff":{"baseSeconds":15,"maxSeconds":60},`),
		`"workers"`, `"placement":{"nodeSelector":{"example.com/no-such-node":"true"}},"workers"`, 1)
	code, body := post(t, project, doc)
	require.Equal(t, http.StatusCreated, code, body)
	usedPods := func() int64 {
		l, err := reader().Quota(ctx, project)
		require.NoError(t, err)
		return l.Used(api.TierOnDemand).Pods
	}

	// Placed: its Job and pods exist, Pending; quota holds 2 pods.
	var cluster string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p, err := reader().Placement(ctx, key)
		if !assert.NoError(c, err) || !assert.NotNil(c, p) || !assert.Len(c, p.Shards, 1) {
			return
		}
		cluster = p.Shards[0].Cluster
		pods, err := gangPods(ctx, reg.Env.Cluster(cluster), project, name)
		if assert.NoError(c, err) && assert.Len(c, pods, 2) {
			for _, p := range pods {
				assert.Equal(c, corev1.PodPending, p.Status.Phase)
			}
		}
	}, 30*time.Second, 200*time.Millisecond)
	assert.EqualValues(t, 2, usedPods(), "quota holds the gang while it is placed")
	placed := time.Now()

	// Taken down after the timeout, its quota returned.
	var st *api.Status
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		st, err = reader().Status(ctx, key)
		if !assert.NoError(c, err) || !assert.NotNil(c, st) || !assert.NotNil(c, st.Training) {
			return
		}
		assert.EqualValues(c, 1, st.Training.Requeues)
		assert.NotNil(c, st.Training.NextAttempt)
		assert.Equal(c, api.PhasePending, st.Phase)
		l, err := reader().Quota(ctx, project)
		if assert.NoError(c, err) {
			assert.Zero(c, l.Used(api.TierOnDemand).Pods, "quota returned while requeued")
			assert.Zero(c, l.Used(api.TierOnDemand).MilliCPU)
		}
		cl := reg.Env.Cluster(cluster)
		_, err = cl.Client.BatchV1().Jobs(api.Namespace(project)).Get(ctx, name, metav1.GetOptions{})
		assert.True(c, apierrors.IsNotFound(err), "the Job is removed: %v", err)
		_, err = cl.Client.CoreV1().Services(api.Namespace(project)).Get(ctx, name, metav1.GetOptions{})
		assert.True(c, apierrors.IsNotFound(err), "the Service is removed: %v", err)
	}, 30*time.Second, 200*time.Millisecond)
	down := time.Now()
	wait := time.Until(*st.Training.NextAttempt)
	t.Logf("taken down %v after placement (timeout 5s); next attempt in %v; reason: %s", down.Sub(placed).Round(time.Millisecond), wait.Round(time.Second), st.Training.LastRequeue)
	assert.InDelta(t, 15, wait.Seconds(), 3, "first backoff is baseSeconds")

	events := map[string]bool{}
	require.Eventually(t, func() bool {
		for {
			m, err := sub.NextMsg(10 * time.Millisecond)
			if err != nil {
				break
			}
			var ev api.WorkloadEvent
			if json.Unmarshal(m.Data, &ev) == nil {
				events[ev.Event] = true
			}
		}
		return events[api.EventGangTimeout] && events[api.EventRequeued]
	}, 10*time.Second, 100*time.Millisecond, "events seen: %v", events)

	// Placed again after its backoff, with its quota reserved again.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p, err := reader().Placement(ctx, key)
		if !assert.NoError(c, err) || !assert.NotNil(c, p) || !assert.Len(c, p.Shards, 1) || !assert.NotNil(c, p.Gang) {
			return
		}
		assert.EqualValues(c, 2, p.Gang.Attempt)
		l, err := reader().Quota(ctx, project)
		if assert.NoError(c, err) {
			assert.EqualValues(c, 2, l.Used(api.TierOnDemand).Pods, "quota reserved again")
		}
	}, 40*time.Second, 250*time.Millisecond)
	t.Logf("placed again (attempt 2) %v after the take-down", time.Since(down).Round(time.Millisecond))
}

// failLabel makes kwok's chaos stage fail a Running pod (testdata/stages.yaml).
const failLabel = "pod-container-running-failed.stage.kwok.x-k8s.io"

// TestFailedWorkerFailsOrRestartsTheGang: workers that fail (kwok's chaos
// stage, exit 1) fail a FailGang gang at once; a RestartGang gang with
// maxRestarts 1 is recreated whole once (a new Job, attempt 2, the event
// gang-restarted) and then, failing again, fails.
func TestFailedWorkerFailsOrRestartsTheGang(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	const project = "ml-fail"
	tests := []struct {
		name, policy string
		wantAttempt  int32
		wantRestarts int32
	}{
		{"failgang", api.GangFail, 1, 0},
		{"restartgang", api.GangRestart, 2, 1},
	}
	for _, tc := range tests {
		t.Run(tc.policy, func(t *testing.T) {
			key := api.Key(project, api.KindTrainingJob, tc.name)
			sub, err := reader().WatchEvents(project, api.KindTrainingJob, tc.name)
			require.NoError(t, err)
			defer func() { _ = sub.Unsubscribe() }()
			doc := strings.Replace(trainingDoc(tc.name, 2, 0, "", fmt.Sprintf(`"failurePolicy":{"policy":%q,"maxRestarts":1},`, tc.policy)),
				`"holdrunning":"true"`, fmt.Sprintf(`"holdrunning":"true",%q:"true"`, failLabel), 1)
			start := time.Now()
			code, body := post(t, project, doc)
			require.Equal(t, http.StatusCreated, code, body)
			var st *api.Status
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				var err error
				st, err = reader().Status(ctx, key)
				if !assert.NoError(c, err) || !assert.NotNil(c, st) || !assert.NotNil(c, st.Training) {
					return
				}
				assert.Equal(c, api.PhaseFailed, st.Phase)
				assert.Equal(c, tc.wantAttempt, st.Training.Attempt)
				assert.Equal(c, tc.wantRestarts, st.Training.Restarts)
				if assert.Len(c, st.Training.Ranks, 2) {
					assert.Contains(c, []string{st.Training.Ranks[0].Phase, st.Training.Ranks[1].Phase}, "Failed")
				}
			}, 60*time.Second, 250*time.Millisecond)
			t.Logf("%s: Failed after %d attempt(s), %v after create", tc.policy, st.Training.Attempt, time.Since(start).Round(time.Millisecond))
			restarted := false
			for {
				m, err := sub.NextMsg(10 * time.Millisecond)
				if err != nil {
					break
				}
				var ev api.WorkloadEvent
				if json.Unmarshal(m.Data, &ev) == nil && ev.Event == api.EventGangRestarted {
					restarted = true
				}
			}
			assert.Equal(t, tc.wantRestarts > 0, restarted, "a gang-restarted event")
		})
	}
}
