package propagator

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
	"atoll.dev/libs/testenv"
)

// TestCronJobFenceInAMemberCluster: in a real member cluster, creating a
// CronJob installs the fence; the CronJob carries fire-from and a lease;
// a renewal moves only the lease and survives the propagator's own apply;
// and the API server refuses a Job of the CronJob whose schedule time is
// before fire-from or after fire-until, and accepts one inside (and one
// without fence annotations). Jobs are created directly, with the
// annotations the CronJob controller would copy: no minute to wait.
func TestCronJobFenceInAMemberCluster(t *testing.T) {
	env := testenv.New(t, testenv.Zones("a")...)
	c := env.Clusters[0]
	ctx := context.Background()
	s := newService(nil, quietLog(), map[string]clients{c.Name: memberClients(t, c, nil)})
	tg := s.targets[c.Name]

	w := cronWorkload()
	w.Spec.(*api.CronJobSpec).Schedule = "0 0 1 1 *" // never while the test runs
	ns := api.Namespace(w.Metadata.Project)
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{api.LabelManaged: "true", api.LabelProject: w.Metadata.Project}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	from := time.Now().UTC().Add(-10 * time.Minute).Truncate(time.Second) // [from, until] is the last 10 min + V
	d := &desired{workload: w, kind: s.kinds[w.Kind], placement: &api.PlacementDecision{Key: w.Key(), Generation: 1,
		Shards: []api.Shard{{Cluster: c.Name, Zone: c.Zone, Replicas: 1, FireFrom: from}}}, hashes: map[string]string{}}
	o, err := d.render(c.Name)
	require.NoError(t, err)
	require.NoError(t, tg.call(func() error {
		return s.kinds[api.KindCronJob].create(ctx, &term{}, tg.cs, ns, o.obj, metav1.CreateOptions{FieldManager: FieldManager})
	}))
	_, err = c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, FenceName, metav1.GetOptions{})
	require.NoError(t, err, "the fence policy is installed with the first CronJob")
	_, err = c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, FenceName, metav1.GetOptions{})
	require.NoError(t, err, "the fence binding is installed with the first CronJob")

	tmpl := func() map[string]string {
		cj, err := c.Client.BatchV1().CronJobs(ns).Get(ctx, w.Metadata.Name, metav1.GetOptions{})
		require.NoError(t, err)
		return cj.Spec.JobTemplate.Annotations
	}
	a := tmpl()
	require.Equal(t, from.Format(time.RFC3339), a[api.AnnoFireFrom])
	until, err := time.Parse(time.RFC3339, a[api.AnnoFireUntil])
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(api.CronFenceLease), until, 5*time.Second, "the lease at create")

	// A renewal (as if 20 minutes later) moves only the lease; the
	// propagator's next apply of an unchanged shard keeps it working.
	renewedAt := time.Now().Add(20 * time.Minute)
	require.NoError(t, tg.renewLease(ctx, ns, w.Metadata.Name, renewedAt))
	a = tmpl()
	assert.Equal(t, api.CronFireUntil(renewedAt).Format(time.RFC3339), a[api.AnnoFireUntil], "renewed lease")
	assert.Equal(t, from.Format(time.RFC3339), a[api.AnnoFireFrom], "fire-from after a renewal")
	o2, err := d.render(c.Name)
	require.NoError(t, err)
	require.NoError(t, tg.apply(ctx, s.kinds[api.KindCronJob], o2, ns), "the propagator's apply after a renewal")
	a = tmpl()
	until, err = time.Parse(time.RFC3339, a[api.AnnoFireUntil])
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(api.CronFenceLease), until, 5*time.Second, "the lease after an apply")

	// Jobs as the CronJob controller makes them: the template's labels
	// and annotations, and the schedule time.
	job := func(name string, at time.Time, fence bool) *batchv1.Job {
		annos := maps.Clone(tmpl())
		if !fence {
			delete(annos, api.AnnoFireFrom)
			delete(annos, api.AnnoFireUntil)
		}
		annos[batchv1.CronJobScheduledTimestampAnnotation] = at.Format(time.RFC3339)
		return &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels(w, d.placement.Shards[0]), Annotations: annos},
			Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}},
		}
	}
	until, _ = time.Parse(time.RFC3339, tmpl()[api.AnnoFireUntil])
	create := func(j *batchv1.Job, dry bool) error {
		o := metav1.CreateOptions{}
		if dry {
			o.DryRun = []string{metav1.DryRunAll}
		}
		_, err := c.Client.BatchV1().Jobs(ns).Create(ctx, j, o)
		return err
	}
	// The policy takes effect a moment after it is created: dry runs (which
	// admission sees too) until it refuses.
	start := time.Now()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Error(ct, create(job("probe", from.Add(-time.Minute), true), true))
	}, 30*time.Second, 200*time.Millisecond, "the fence never took effect")
	t.Logf("fence in effect %v after it was applied", time.Since(start).Round(time.Millisecond))

	tests := []struct {
		name   string
		at     time.Time
		fence  bool
		refuse string // in the error, "" to accept
	}{
		{"before-fire-from", from.Add(-time.Minute), true, api.AnnoFireFrom},
		{"after-fire-until", until.Add(time.Minute), true, api.AnnoFireUntil},
		{"at-fire-from", from, true, ""},
		{"inside", from.Add(time.Minute), true, ""},
		{"unfenced", from.Add(-time.Minute), false, ""},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := create(job(fmt.Sprintf("run-%d", i), tc.at, tc.fence), false)
			if tc.refuse == "" {
				require.NoError(t, err, "a Job for %v", tc.at)
				return
			}
			require.Error(t, err, "a Job for %v outside [%v, %v]", tc.at, from, until)
			assert.True(t, apierrors.IsForbidden(err) || apierrors.IsInvalid(err), "refused with %v", err)
			assert.Contains(t, err.Error(), tc.refuse)
			t.Logf("refused: %v", err)
		})
	}
}
