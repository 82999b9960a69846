package testenv_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/testenv"
)

// TestDebugSimulation checks, with client-go as kubectl uses it, that a
// cluster started with DebugSim serves every Pod's logs from the file
// (following appended lines) and runs exec commands locally.
func TestDebugSimulation(t *testing.T) {
	if testing.Short() {
		t.Skip("member clusters")
	}
	dir := t.TempDir()
	logs := filepath.Join(dir, "pods.log")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	env, err := testenv.Start(ctx, testenv.Options{Debug: &testenv.DebugSim{LogsFile: logs, ExecWorkDir: filepath.Join(dir, "exec")}}, testenv.ClusterSpec{Zone: "a"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		if err := env.Stop(sctx); err != nil {
			t.Error(err)
		}
	})
	if err := testenv.AppendLog(logs, "first line", "second line"); err != nil {
		t.Fatal(err)
	}
	c := env.Clusters[0]
	if _, err := c.AddNodes(ctx, testenv.NodePool{Name: "general", Count: 1}); err != nil {
		t.Fatal(err)
	}
	// box reads a ConfigMap and a Secret as variables and files; stray
	// names a ConfigMap that does not exist, so it gets no files of its
	// own and exec runs in ExecWorkDir.
	if _, err := c.Client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "conf"}, Data: map[string]string{"LEVEL": "debug", "app.conf": "a=1\n"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "db"}, Data: map[string][]byte{"PASSWORD": []byte("hunter2"), "TOKEN": []byte("tok")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox",
			Env: []corev1.EnvVar{{Name: "PLAIN", Value: "v"},
				{Name: "LEVEL", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}, Key: "LEVEL"}}}},
			EnvFrom:      []corev1.EnvFromSource{{Prefix: "S_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}}},
			VolumeMounts: []corev1.VolumeMount{{Name: "conf", MountPath: "/etc/conf"}, {Name: "db", MountPath: "/etc/db"}},
		}},
			Volumes: []corev1.Volume{
				{Name: "conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}}}},
				{Name: "db", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "db", DefaultMode: ptr.To(int32(0o440)),
					Items: []corev1.KeyToPath{{Key: "TOKEN", Path: "sub/token", Mode: ptr.To(int32(0o400))}}}}},
			}},
	}
	stray := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "stray", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox",
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "missing"}}}}}}},
	}
	for _, p := range []*corev1.Pod{pod, stray} {
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		for _, name := range []string{"box", "stray"} {
			p, err := c.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if assert.NoError(ct, err, "get pod") {
				assert.Equal(ct, corev1.PodRunning, p.Status.Phase, "pod phase")
			}
		}
	}, time.Minute, 200*time.Millisecond)

	t.Run("logs", func(t *testing.T) {
		b, err := c.Client.CoreV1().Pods("default").GetLogs("box", &corev1.PodLogOptions{Container: "app"}).DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(b), "first line\nsecond line\n"; got != want {
			t.Errorf("logs %q, want %q", got, want)
		}
	})

	t.Run("follow", func(t *testing.T) {
		fctx, fcancel := context.WithTimeout(ctx, 30*time.Second)
		defer fcancel()
		rc, err := c.Client.CoreV1().Pods("default").GetLogs("box", &corev1.PodLogOptions{Follow: true, TailLines: ptr.To(int64(1))}).Stream(fctx)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		sc := bufio.NewScanner(rc)
		if !sc.Scan() || sc.Text() != "second line" {
			t.Fatalf("first followed line %q (%v), want the last line of the file", sc.Text(), sc.Err())
		}
		if err := testenv.AppendLog(logs, "appended"); err != nil {
			t.Fatal(err)
		}
		if !sc.Scan() || sc.Text() != "appended" {
			t.Fatalf("next followed line %q (%v), want the appended one", sc.Text(), sc.Err())
		}
	})

	execIn := func(t *testing.T, pod, stdin string, cmd ...string) (string, error) {
		req := c.Client.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name(pod).SubResource("exec").
			VersionedParams(&corev1.PodExecOptions{Container: "app", Command: cmd, Stdin: stdin != "", Stdout: true, Stderr: true}, scheme.ParameterCodec)
		ex, err := remotecommand.NewWebSocketExecutor(c.Config, "POST", req.URL().String())
		if err != nil {
			t.Fatal(err)
		}
		// Two buffers: client-go copies stdout and stderr concurrently.
		var out, errOut bytes.Buffer
		o := remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut}
		if stdin != "" {
			o.Stdin = strings.NewReader(stdin)
		}
		err = ex.StreamWithContext(ctx, o)
		return out.String(), err
	}
	exec := func(t *testing.T, stdin string, cmd ...string) (string, error) {
		return execIn(t, "box", stdin, cmd...)
	}
	// A pod's variables and files, as its kubelet would give them, are
	// those of the Exec the simulation writes for it.
	t.Run("exec", func(t *testing.T) {
		const script = `echo hello; pwd; echo "$PLAIN $LEVEL $S_PASSWORD $S_TOKEN"; cat etc/conf/LEVEL; echo; cat etc/conf/app.conf; cat etc/db/sub/token; echo; stat -c %a etc/db/sub/token; ls etc/db`
		want := "hello\n" + filepath.Join(dir, "exec", "pods", c.Name, "default", "box", "app") + "\nv debug hunter2 tok\ndebug\na=1\ntok\n400\nsub\n"
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			out, err := exec(t, "", "sh", "-c", script)
			if assert.NoError(ct, err) {
				assert.Equal(ct, want, out, "exec output")
			}
		}, 30*time.Second, 200*time.Millisecond)
	})
	t.Run("exec-without-own-files", func(t *testing.T) {
		out, err := execIn(t, "stray", "", "sh", "-c", "echo hello; pwd")
		if err != nil {
			t.Fatal(err)
		}
		if want := "hello\n" + filepath.Join(dir, "exec") + "\n"; out != want {
			t.Errorf("exec output %q, want %q", out, want)
		}
	})
	// KWOK reports a non-zero exit as an internal error naming the exit
	// status, not as a NonZeroExitCode status as a kubelet does.
	t.Run("exec-exit-code", func(t *testing.T) {
		_, err := exec(t, "", "sh", "-c", "exit 3")
		if err == nil || !strings.HasSuffix(err.Error(), ": exit status 3") {
			t.Errorf("exec of exit 3: %v, want an error ending in exit status 3", err)
		}
	})
	// KWOK's terminal needs stdin attached (without it the simulated
	// kubelet fails), and output written just before the command exits can
	// be lost: the command lingers a moment.
	t.Run("exec-tty", func(t *testing.T) {
		req := c.Client.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name("box").SubResource("exec").
			VersionedParams(&corev1.PodExecOptions{Container: "app", Command: []string{"sh", "-c", "test -t 0 && echo on-a-tty; sleep 0.3"}, Stdin: true, Stdout: true, TTY: true}, scheme.ParameterCodec)
		ex, err := remotecommand.NewWebSocketExecutor(c.Config, "POST", req.URL().String())
		if err != nil {
			t.Fatal(err)
		}
		pr, pw := io.Pipe()
		defer pw.Close()
		var out bytes.Buffer
		if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: pr, Stdout: &out, Tty: true}); err != nil {
			t.Fatal(err)
		}
		if out.String() != "on-a-tty\r\n" {
			t.Errorf("tty output %q, want %q", out.String(), "on-a-tty\r\n")
		}
	})
	t.Run("exec-stdin", func(t *testing.T) {
		out, err := exec(t, "echo hi; exit 0\n", "sh")
		if err != nil {
			t.Fatal(err)
		}
		if out != "hi\n" {
			t.Errorf("interactive sh output %q, want %q", out, "hi\n")
		}
	})
}
