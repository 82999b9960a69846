package secrets

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"atoll.dev/libs/api"
	"atoll.dev/libs/sdk"
	"atoll.dev/libs/testenv"
	"atoll.dev/services/atoll/cli"
	"atoll.dev/services/atoll/e2e"
)

// zonesApp is App name of replicas pods over every zone reading Config
// conf (LEVEL as a variable, app.conf as a file under /etc/app) and
// Secret secret (PASSWORD as a variable, every key with the prefix S_,
// TOKEN as a file /etc/secret/token, of a Secret's mode 0400).
func zonesApp(name, conf, secret string, replicas int) []byte {
	return fmt.Appendf(nil, `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":%q,"name":%q},
"spec":{"replicas":%d,"rollout":{"bakeSeconds":1},
"template":{"containers":[{"name":"web","image":"web:1","resources":{"requests":{"cpu":"10m","memory":"16Mi"}},
 "env":[{"name":"LEVEL","valueFrom":{"kind":"Config","name":%q,"key":"LEVEL"}},
        {"name":"PASSWORD","valueFrom":{"kind":"Secret","name":%q,"key":"PASSWORD"}}],
 "envFrom":[{"kind":"Secret","name":%q,"prefix":"S_"}],
 "volumeMounts":[{"name":"conf","mountPath":"/etc/app"},{"name":"secret","mountPath":"/etc/secret"}]}],
 "volumes":[{"name":"conf","config":{"name":%q,"items":[{"key":"app.conf","path":"app.conf"}]}},
            {"name":"secret","secret":{"name":%q,"items":[{"key":"TOKEN","path":"token"}]}}]}}}`,
		project, name, replicas, conf, secret, secret, conf, secret)
}

// podReads is what container c of pod p reads, as the kubelet of its
// cluster gives it: each variable ("env:NAME") and each mounted file
// ("file:/path", with " mode 0400" for a file mode), resolved against the
// ConfigMaps and Secrets of the pod's namespace in cluster cl.
func podReads(ctx context.Context, cl *testenv.Cluster, p *corev1.Pod, c *corev1.Container) (map[string]string, error) {
	core := cl.Client.CoreV1()
	cms, secrets := map[string]*corev1.ConfigMap{}, map[string]*corev1.Secret{}
	cm := func(name string) (*corev1.ConfigMap, error) {
		if m, ok := cms[name]; ok {
			return m, nil
		}
		m, err := core.ConfigMaps(p.Namespace).Get(ctx, name, metav1.GetOptions{})
		cms[name] = m
		return m, err
	}
	sec := func(name string) (*corev1.Secret, error) {
		if s, ok := secrets[name]; ok {
			return s, nil
		}
		s, err := core.Secrets(p.Namespace).Get(ctx, name, metav1.GetOptions{})
		secrets[name] = s
		return s, err
	}
	out := map[string]string{}
	for _, ef := range c.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil:
			m, err := cm(ef.ConfigMapRef.Name)
			if err != nil {
				return nil, err
			}
			for k, v := range m.Data {
				out["env:"+ef.Prefix+k] = v
			}
		case ef.SecretRef != nil:
			s, err := sec(ef.SecretRef.Name)
			if err != nil {
				return nil, err
			}
			for k, v := range s.Data {
				out["env:"+ef.Prefix+k] = string(v)
			}
		}
	}
	for _, e := range c.Env {
		switch r := e.ValueFrom; {
		case r == nil:
			out["env:"+e.Name] = e.Value
		case r.ConfigMapKeyRef != nil:
			m, err := cm(r.ConfigMapKeyRef.Name)
			if err != nil {
				return nil, err
			}
			out["env:"+e.Name] = m.Data[r.ConfigMapKeyRef.Key]
		case r.SecretKeyRef != nil:
			s, err := sec(r.SecretKeyRef.Name)
			if err != nil {
				return nil, err
			}
			out["env:"+e.Name] = string(s.Data[r.SecretKeyRef.Key])
		}
	}
	for _, m := range c.VolumeMounts {
		i := slices.IndexFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 {
			return nil, fmt.Errorf("pod %s mounts no volume %s", p.Name, m.Name)
		}
		v := p.Spec.Volumes[i]
		var data map[string]string
		var items []corev1.KeyToPath
		var mode *int32
		switch {
		case v.ConfigMap != nil:
			cmap, err := cm(v.ConfigMap.Name)
			if err != nil {
				return nil, err
			}
			data, items, mode = cmap.Data, v.ConfigMap.Items, v.ConfigMap.DefaultMode
		case v.Secret != nil:
			s, err := sec(v.Secret.SecretName)
			if err != nil {
				return nil, err
			}
			data = map[string]string{}
			for k, b := range s.Data {
				data[k] = string(b)
			}
			items, mode = v.Secret.Items, v.Secret.DefaultMode
		default:
			continue
		}
		for _, it := range items {
			f := "file:" + path.Join(m.MountPath, it.Path)
			out[f] = data[it.Key]
			m := mode
			if it.Mode != nil {
				m = it.Mode
			}
			if m != nil {
				out[f+" mode"] = fmt.Sprintf("%04o", *m)
			}
		}
	}
	return out, nil
}

// TestSecretAndConfigInEveryZone: a Secret and a Config named by an App
// over zones a, b, c. Every value arrives in the App's live pods in every
// zone: each pod's variables and mounted files, resolved as its cluster's
// kubelet resolves them, hold the values written; read inside one live
// pod per zone through `atoll exec` (printenv, cat, stat), every variable
// and file is the value written, of its mode. The App's status names,
// per zone, the versions its pods run, and describe shows them. No
// message of any stream of the region holds a value in the clear, no read
// of the Secret or of the App returns one, and the gateway's process
// (environment, command line, open files, mounts) holds no
// key-encryption key.
func TestSecretAndConfigInEveryZone(t *testing.T) {
	e2e.Need(t)
	ctx := t.Context()
	dir := t.TempDir()
	password, token := unique("zones-password-"), unique("zones-token-")
	tokenFile := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(token), 0o600))
	confFile := filepath.Join(dir, "app.conf")
	require.NoError(t, os.WriteFile(confFile, []byte("level=info\n"), 0o600))
	atoll(t, "create", "config", "zones-conf", "--from-literal", "LEVEL=info", "--from-file", confFile)
	atoll(t, "create", "secret", "zones-db", "--from-literal", "PASSWORD="+password, "--from-file", "TOKEN="+tokenFile)

	c, err := sdk.New(reg.GatewayURL, sdk.WithToken(reg.AdminToken), sdk.WithTimeout(10*time.Second))
	require.NoError(t, err)
	start := time.Now()
	_, err = c.CreateWorkloadJSON(ctx, project, zonesApp("zones-web", "zones-conf", "zones-db", 3), "")
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), project, api.KindApp, "zones-web")
	})
	want := map[string]string{
		"env:LEVEL": "info", "env:PASSWORD": password, "env:S_PASSWORD": password, "env:S_TOKEN": token,
		"file:/etc/app/app.conf": "level=info\n", "file:/etc/secret/token": token, "file:/etc/secret/token mode": "0400",
	}
	read := map[string]int{}
	live := map[string]string{} // a live pod of the App per zone
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		clear(read)
		clear(live)
		for _, cl := range reg.Env.Clusters {
			pl, err := cl.Client.CoreV1().Pods(api.Namespace(project)).List(ctx, metav1.ListOptions{LabelSelector: api.LabelWorkload + "=zones-web"})
			if !assert.NoError(ct, err) {
				return
			}
			for i := range pl.Items {
				p := &pl.Items[i]
				if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
					continue
				}
				got, err := podReads(ctx, cl, p, &p.Spec.Containers[0])
				if !assert.NoError(ct, err, "%s: pod %s", cl.Zone, p.Name) {
					continue
				}
				for k, v := range want {
					assert.Equal(ct, v, got[k], "%s: pod %s reads %s", cl.Zone, p.Name, k)
				}
				read[cl.Zone]++
				live[cl.Zone] = p.Name
			}
		}
		for _, z := range []string{"a", "b", "c"} {
			assert.Positive(ct, read[z], "zone %s runs no pod of the App", z)
		}
	}, 120*time.Second, 500*time.Millisecond)
	t.Logf("every value read by the App's live pods in zones a, b, c (%v), %v after the App's create", read, time.Since(start).Round(time.Millisecond))

	// Inside one live pod per zone, through `atoll exec`: each variable
	// with printenv, each file with cat and its mode with stat (the test
	// clusters' containers have their files below the directory exec runs
	// in, see testenv.DebugSim).
	for _, z := range []string{"a", "b", "c"} {
		pod := live[z]
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			for _, k := range slices.Sorted(maps.Keys(want)) {
				cmd, wantOut := podCommand(k, want[k])
				out, err := tryAtoll(t, append([]string{"exec", "app", "zones-web", "--pod", pod, "--container", "web", "--"}, cmd...)...)
				if assert.NoError(ct, err, "zone %s: pod %s: %s", z, pod, strings.Join(cmd, " ")) {
					assert.Equal(ct, wantOut, out, "zone %s: pod %s reads %s through atoll exec", z, pod, k)
				}
			}
		}, 60*time.Second, 500*time.Millisecond)
	}
	t.Logf("every value read through atoll exec in pods %v", live)

	// The status names the versions the pods run in every zone.
	var secretDigest string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		sw, err := c.Get(ctx, project, api.KindSecret, "zones-db")
		if !assert.NoError(ct, err) {
			return
		}
		s, err := sdk.SecretOf(sw)
		if !assert.NoError(ct, err) {
			return
		}
		secretDigest = s.Digest
		w, err := c.Get(ctx, project, api.KindApp, "zones-web")
		if !assert.NoError(ct, err) {
			return
		}
		st := w.Status
		assert.Equal(ct, s.Digest, st.ConfigVersions["Secret/zones-db"])
		assert.NotEmpty(ct, st.ConfigVersions["Config/zones-conf"])
		for _, z := range []string{"a", "b", "c"} {
			for _, id := range []string{"Config/zones-conf", "Secret/zones-db"} {
				assert.Equal(ct, []string{st.ConfigVersions[id]}, st.Zones[z].ConfigVersions[id], "zone %s %s", z, id)
			}
		}
	}, 60*time.Second, 500*time.Millisecond)
	d := atoll(t, "describe", "app", "zones-web")
	assert.Contains(t, d, "Config versions:")
	assert.Regexp(t, `Secret/zones-db\s+`+secretDigest+`\s+`+secretDigest+`\s+`+secretDigest+`\s+`+secretDigest, d)

	// No read returns a value.
	reads := []string{d, atoll(t, "get", "secret", "zones-db", "-o", "json"), atoll(t, "get", "app", "zones-web", "-o", "json"), atoll(t, "describe", "secret", "zones-db")}
	for i, r := range reads {
		for _, x := range []string{password, token} {
			assert.NotContains(t, r, x, "read %d", i)
		}
	}

	// Every message of every stream of the region: no value in the clear.
	scanned := 0
	for name := range reg.Bus.JS.StreamNames(ctx).Name() {
		s, err := reg.Bus.JS.Stream(ctx, name)
		require.NoError(t, err)
		info, err := s.Info(ctx)
		require.NoError(t, err)
		for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if err != nil {
				continue // deleted
			}
			scanned++
			for _, x := range []string{password, token} {
				assert.False(t, bytes.Contains(m.Data, []byte(x)), "stream %s message %d (%s) holds a value in the clear", name, seq, m.Subject)
			}
		}
	}
	t.Logf("%d messages of the region's streams hold no value in the clear", scanned)

	// The gateway's process holds no key-encryption key.
	pids := processes(ctx, t)
	gw := strings.ToUpper(procView(t, pids["gateway"]))
	for _, x := range kekSecrets(t) {
		assert.NotContains(t, gw, strings.ToUpper(x), "the gateway's process (pid %d) names a key-encryption key", pids["gateway"])
	}
}

// podCommand is the command that reads k (a key of podReads) in a
// container, and the output it gives when k is v.
func podCommand(k, v string) (cmd []string, out string) {
	switch {
	case strings.HasPrefix(k, "env:"):
		return []string{"printenv", strings.TrimPrefix(k, "env:")}, v + "\n"
	case strings.HasSuffix(k, " mode"):
		f := strings.TrimSuffix(strings.TrimPrefix(k, "file:"), " mode")
		return []string{"stat", "-c", "%a", "." + f}, strings.TrimLeft(v, "0") + "\n"
	default:
		return []string{"cat", "." + strings.TrimPrefix(k, "file:")}, v
	}
}

// tryAtoll runs the CLI as atoll does, returning its standard output and
// its error (with its standard error) rather than failing the test.
func tryAtoll(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := cli.Root()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	base := []string{"--config", filepath.Join(t.TempDir(), "config.yaml"), "--server", reg.GatewayURL, "--token", reg.AdminToken, "-p", project}
	if reg.CAFile != "" {
		base = append(base, "--ca", reg.CAFile)
	}
	root.SetArgs(append(base, args...))
	if err := root.Execute(); err != nil {
		return out.String(), fmt.Errorf("atoll %s: %w: %s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), nil
}

// kekSecrets are what would show a key-encryption key: its directories
// and files, and the keys themselves.
func kekSecrets(t *testing.T) []string {
	t.Helper()
	out := []string{filepath.Dir(reg.KEKDir), reg.KEKDir, reg.KEKPublicFile, "KEK"}
	pub, err := os.ReadFile(reg.KEKPublicFile)
	require.NoError(t, err)
	if f := strings.Fields(string(pub)); len(f) > 0 {
		out = append(out, f[len(f)-1])
	}
	keys, err := os.ReadDir(reg.KEKDir)
	require.NoError(t, err)
	require.NotEmpty(t, keys, "no private key in %s", reg.KEKDir)
	for _, k := range keys {
		b, err := os.ReadFile(filepath.Join(reg.KEKDir, k.Name()))
		require.NoError(t, err)
		out = append(out, strings.TrimSpace(string(b)))
	}
	return out
}
