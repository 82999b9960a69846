package config

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/testenv"
	"atoll.dev/services/atoll/e2e"
	"atoll.dev/services/atoll/e2e/busclient"
)

const project = "conf"

func configDoc(name, level string) []byte {
	return fmt.Appendf(nil, `{"apiVersion":"atoll.dev/v1","kind":"Config","metadata":{"project":%q,"name":%q},
"spec":{"data":{"LEVEL":%q},"files":{"app.conf":"level=%s\n"}}}`, project, name, level, level)
}

// appDoc is an App of replicas pods in zones (all when empty) that reads
// Config conf: LEVEL as a variable, every key with the prefix C_, and
// app.conf as a file under /etc/app; rollout says whether a change of
// conf rolls it.
func appDoc(name, conf string, replicas int, zones string, rollout bool) []byte {
	placement := ""
	if zones != "" {
		placement = fmt.Sprintf(`"placement":{"zones":[%s]},`, zones)
	}
	return fmt.Appendf(nil, `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":%q},
"spec":{"replicas":%d,%s"rollout":{"bakeSeconds":1},
"template":{"containers":[{"name":"web","image":"web:1","resources":{"requests":{"cpu":"10m","memory":"16Mi"}},
 "env":[{"name":"LEVEL","valueFrom":{"kind":"Config","name":%q,"key":"LEVEL","rolloutOnChange":%t}}],
 "envFrom":[{"kind":"Config","name":%q,"prefix":"C_","rolloutOnChange":%t}],
 "volumeMounts":[{"name":"conf","mountPath":"/etc/app"}]}],
 "volumes":[{"name":"conf","config":{"name":%q,"items":[{"key":"app.conf","path":"app.conf"}],"rolloutOnChange":%t}}]}}}`,
		project, name, replicas, placement, conf, rollout, conf, rollout, conf, rollout)
}

// configMap returns cluster c's copy of Config name (nil when none).
func configMap(ctx context.Context, c *testenv.Cluster, name string) (*corev1.ConfigMap, error) {
	cm, err := c.Client.CoreV1().ConfigMaps(api.Namespace(project)).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return cm, err
}

// pods returns the running pods of App app in cluster c.
func pods(ctx context.Context, c *testenv.Cluster, app string) ([]corev1.Pod, error) {
	l, err := c.Client.CoreV1().Pods(api.Namespace(project)).List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=" + app})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(l.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning }), nil
}

// checkPodsRead asserts that each pod reads Config conf as the App says.
func checkPodsRead(ct assert.TestingT, ps []corev1.Pod, conf string) {
	for _, p := range ps {
		c := p.Spec.Containers[slices.IndexFunc(p.Spec.Containers, func(c corev1.Container) bool { return c.Name == "web" })]
		i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "LEVEL" })
		if assert.GreaterOrEqual(ct, i, 0, "pod %s has no LEVEL", p.Name) {
			ref := c.Env[i].ValueFrom
			assert.True(ct, ref != nil && ref.ConfigMapKeyRef != nil && ref.ConfigMapKeyRef.Name == conf && ref.ConfigMapKeyRef.Key == "LEVEL", "pod %s LEVEL %+v", p.Name, ref)
		}
		assert.True(ct, slices.ContainsFunc(c.EnvFrom, func(e corev1.EnvFromSource) bool {
			return e.ConfigMapRef != nil && e.ConfigMapRef.Name == conf && e.Prefix == "C_"
		}), "pod %s envFrom %+v", p.Name, c.EnvFrom)
		assert.True(ct, slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool {
			return v.ConfigMap != nil && v.ConfigMap.Name == conf && len(v.ConfigMap.Items) == 1 && v.ConfigMap.Items[0].Path == "app.conf"
		}), "pod %s volumes %+v", p.Name, p.Spec.Volumes)
	}
}

// TestConfigUsedByAnApp: a Config named by an App over zones a, b, c
// arrives, as a ConfigMap holding its values, in every zone's cluster,
// and the App's pods there read it (env, envFrom, a mounted file);
// changing it rolls the App (every pod replaced, carrying the new
// version). A Config named only by an App in zone a with
// rolloutOnChange false is only in zone a's cluster, changes there
// without a restart, and leaves with the App. A missing reference is
// 422; deleting a used Config is 409 naming the App.
func TestConfigUsedByAnApp(t *testing.T) {
	e2e.Need(t)
	ctx := context.Background()
	start := time.Now()
	for _, doc := range [][]byte{configDoc("web-conf", "info"), configDoc("solo-conf", "one")} {
		_, err := cl.Submit(ctx, doc)
		require.NoError(t, err)
	}
	web, err := cl.Submit(ctx, appDoc("web", "web-conf", 3, "", true))
	require.NoError(t, err)
	v1 := web.Spec.PodTemplate().ConfigVersions["Config/web-conf"]
	require.NotEmpty(t, v1, "the App carries the Config's version")
	_, err = cl.Submit(ctx, appDoc("solo", "solo-conf", 1, `"a"`, false))
	require.NoError(t, err)

	// Every zone: the ConfigMap with the values, pods reading it at v1.
	uids := map[string]bool{}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		clear(uids)
		for _, c := range reg.Env.Clusters {
			cm, err := configMap(ctx, c, "web-conf")
			if !assert.NoError(ct, err) || !assert.NotNil(ct, cm, "zone %s has no web-conf", c.Zone) {
				continue
			}
			assert.Equal(ct, map[string]string{"LEVEL": "info", "app.conf": "level=info\n"}, cm.Data, c.Zone)
			assert.Equal(ct, "true", cm.Labels[api.LabelManaged])
			ps, err := pods(ctx, c, "web")
			if !assert.NoError(ct, err) || !assert.NotEmpty(ct, ps, "zone %s runs no web pod", c.Zone) {
				continue
			}
			checkPodsRead(ct, ps, "web-conf")
			for _, p := range ps {
				assert.Equal(ct, v1, p.Annotations[api.AnnoConfigVersionPrefix+"web-conf"], p.Name)
				uids[string(p.UID)] = true
			}
		}
	}, 90*time.Second, 500*time.Millisecond)
	t.Logf("web-conf in zones a, b, c and read by %d pods, %v after the first write", len(uids), time.Since(start).Round(time.Millisecond))

	// solo-conf: zone a only.
	soloPods := map[string]bool{}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		for _, c := range reg.Env.Clusters {
			cm, err := configMap(ctx, c, "solo-conf")
			assert.NoError(ct, err)
			assert.Equal(ct, c.Zone == "a", cm != nil, "solo-conf in zone %s", c.Zone)
		}
		ps, err := pods(ctx, reg.Env.Cluster("zone-a"), "solo")
		if assert.NoError(ct, err) && assert.Len(ct, ps, 1) {
			checkPodsRead(ct, ps, "solo-conf")
			soloPods[string(ps[0].UID)] = true
		}
	}, 60*time.Second, 500*time.Millisecond)

	// Bad references: 422 naming the field and the name; 409 naming the App.
	_, err = cl.Submit(ctx, appDoc("broken", "no-such-conf", 1, "", true))
	var be *busclient.Error
	require.True(t, errors.As(err, &be), "submit with a missing Config: %v", err)
	assert.Equal(t, api.StatusUnprocessable, be.Status)
	assert.Contains(t, be.Body.Message, "no-such-conf")
	assert.True(t, slices.ContainsFunc(be.Body.Fields, func(f api.FieldError) bool {
		return f.Field == "spec.template.containers[0].env[0].valueFrom.name"
	}), "fields %+v", be.Body.Fields)
	err = cl.Delete(ctx, project, api.KindConfig, "web-conf")
	require.True(t, errors.As(err, &be), "delete of a used Config: %v", err)
	assert.Equal(t, api.StatusConflict, be.Status)
	assert.Contains(t, be.Body.Message, "App/web")

	// A change of web-conf rolls web: every pod replaced, at v2.
	changed := time.Now()
	_, err = cl.Update(ctx, configDoc("web-conf", "debug"))
	require.NoError(t, err)
	_, err = cl.Update(ctx, configDoc("solo-conf", "two"))
	require.NoError(t, err)
	var v2 string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		w, err := cl.Workload(ctx, api.Key(project, api.KindApp, "web"))
		if !assert.NoError(ct, err) {
			return
		}
		v2 = w.Spec.PodTemplate().ConfigVersions["Config/web-conf"]
		assert.NotEqual(ct, v1, v2, "the App's version")
		for _, c := range reg.Env.Clusters {
			cm, err := configMap(ctx, c, "web-conf")
			if assert.NoError(ct, err) && assert.NotNil(ct, cm) {
				assert.Equal(ct, "debug", cm.Data["LEVEL"], c.Zone)
			}
			ps, err := pods(ctx, c, "web")
			if !assert.NoError(ct, err) || !assert.NotEmpty(ct, ps, c.Zone) {
				continue
			}
			for _, p := range ps {
				assert.False(ct, uids[string(p.UID)], "zone %s: pod %s not replaced", c.Zone, p.Name)
				assert.Equal(ct, v2, p.Annotations[api.AnnoConfigVersionPrefix+"web-conf"], p.Name)
			}
		}
	}, 120*time.Second, 500*time.Millisecond)
	t.Logf("web rolled to web-conf %s in every zone %v after the change", v2, time.Since(changed).Round(time.Millisecond))

	// solo did not restart: its pod is the same, its ConfigMap new.
	cm, err := configMap(ctx, reg.Env.Cluster("zone-a"), "solo-conf")
	require.NoError(t, err)
	require.NotNil(t, cm)
	assert.Equal(t, "two", cm.Data["LEVEL"])
	ps, err := pods(ctx, reg.Env.Cluster("zone-a"), "solo")
	require.NoError(t, err)
	for _, p := range ps {
		assert.True(t, soloPods[string(p.UID)], "solo's pod %s was replaced", p.Name)
	}
	solo, err := cl.Workload(ctx, api.Key(project, api.KindApp, "solo"))
	require.NoError(t, err)
	assert.Equal(t, int64(1), solo.Metadata.Generation, "solo was rolled")

	// solo leaves: so does solo-conf from zone a.
	require.NoError(t, cl.Delete(ctx, project, api.KindApp, "solo"))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		cm, err := configMap(ctx, reg.Env.Cluster("zone-a"), "solo-conf")
		assert.NoError(ct, err)
		assert.Nil(ct, cm, "solo-conf still in zone a")
	}, 60*time.Second, 500*time.Millisecond)
	t.Logf("done in %v", time.Since(start).Round(time.Millisecond))
}
