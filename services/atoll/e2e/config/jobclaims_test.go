package config

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/services/atoll/e2e"
)

// TestJobSetClaimPerIndex: a JobSet of 4 indexes with a claim template
// gets 4 claims in the member clusters that run it, one per index (each
// owned by its index's pod, of the template's size; the index is the
// shard's range start plus the Job's own), and their storage
// counts toward the project's quota; deleting the JobSet releases it.
func TestJobSetClaimPerIndex(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	const name, gi = "shards", int64(1 << 30)
	doc := fmt.Appendf(nil, `{"apiVersion":"atoll.dev/v1","kind":"JobSet","metadata":{"project":%q,"name":%q},
"spec":{"completions":4,"parallelism":4,
"template":{"volumeClaimTemplates":[{"name":"data","storage":"1Gi"}],"containers":[{"name":"work","image":"work:1","resources":{"requests":{"cpu":"10m","memory":"16Mi"}},
 "volumeMounts":[{"name":"data","mountPath":"/data"}]}]}}}`, project, name)
	before, err := cl.Quota(ctx, project)
	require.NoError(t, err)
	start := time.Now()
	w, err := cl.Submit(ctx, doc)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Delete(context.Background(), project, api.KindJobSet, name) })
	tier, _ := w.Spec.Scheduling()

	// Storage: a claim per index, 4 GiB more than before.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		l, err := cl.Quota(ctx, project)
		if assert.NoError(ct, err) {
			assert.Equal(ct, before.Used(tier).StorageBytes+4*gi, l.Used(tier).StorageBytes, "storage counted for the JobSet")
		}
	}, 30*time.Second, 200*time.Millisecond)

	// The claims: one per index, across the clusters that run it.
	byIndex := map[string]string{}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		clear(byIndex)
		for _, c := range reg.Env.Clusters {
			ns := api.Namespace(project)
			pl, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + name})
			if !assert.NoError(ct, err) {
				return
			}
			if len(pl.Items) == 0 {
				continue
			}
			// A shard's Job counts its indexes from 0; the JobSet's index
			// is the start of the shard's range plus the Job's.
			job, err := c.Client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
			if !assert.NoError(ct, err) {
				return
			}
			first, _, _ := strings.Cut(job.Annotations[api.AnnoIndexRange], "-")
			start, err := strconv.Atoi(first)
			if !assert.NoError(ct, err, "index range %q", job.Annotations[api.AnnoIndexRange]) {
				return
			}
			index := map[string]string{} // pod UID to its JobSet index
			for _, p := range pl.Items {
				local, err := strconv.Atoi(p.Annotations["batch.kubernetes.io/job-completion-index"])
				if assert.NoError(ct, err, p.Name) {
					index[string(p.UID)] = strconv.Itoa(start + local)
				}
			}
			cs, err := c.Client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + name})
			if !assert.NoError(ct, err) {
				return
			}
			for _, pvc := range cs.Items {
				q := pvc.Spec.Resources.Requests.Storage()
				assert.Equal(ct, gi, q.Value(), pvc.Name)
				for _, o := range pvc.OwnerReferences {
					if i, ok := index[string(o.UID)]; ok {
						assert.NotContains(ct, byIndex, i, "index %s has two claims", i)
						byIndex[i] = c.Zone + "/" + pvc.Name
					}
				}
			}
		}
		for i := range 4 {
			assert.Contains(ct, byIndex, strconv.Itoa(i), "index %d has no claim", i)
		}
		assert.Len(ct, byIndex, 4)
	}, 90*time.Second, 500*time.Millisecond)
	t.Logf("4 claims, one per index, %v after the submit: %v", time.Since(start).Round(time.Millisecond), byIndex)

	// Deleting the JobSet releases its storage.
	require.NoError(t, cl.Delete(ctx, project, api.KindJobSet, name))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		l, err := cl.Quota(ctx, project)
		if assert.NoError(ct, err) {
			assert.Equal(ct, before.Used(tier).StorageBytes, l.Used(tier).StorageBytes)
		}
	}, 30*time.Second, 200*time.Millisecond)
}
