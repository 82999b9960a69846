package attack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/clusters"
	"atoll.dev/libs/testenv"
	"atoll.dev/services/atoll/e2e"
)

// memberClient is a clientset on a cluster-facing service's own member
// credential, the one the region hands the service. A client refused on
// purpose says so in its user agent, so the region's audit of the
// services' 403s leaves it out; an allowed path keeps the service's own
// agent, and a 403 there fails the package too.
func memberClient(t *testing.T, c *testenv.Cluster, service string, expectForbidden bool) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", c.ServiceKubeconfig(service))
	if err != nil {
		t.Fatalf("%s's kubeconfig: %v", service, err)
	}
	cfg.Timeout = 15 * time.Second
	if expectForbidden {
		cfg.UserAgent = testenv.ForbiddenAgentPrefix + "/" + service
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestMemberCredentials: each cluster-facing service's member credential
// does what the service does and is refused (403) everything else: the
// aggregator cannot create a Deployment, the propagator cannot delete a
// Node nor write outside project namespaces, remediation cannot read a
// Secret in a tenant namespace; the propagator can make a project
// namespace and its objects, and the aggregator can read pod logs there.
func TestMemberCredentials(t *testing.T) {
	e2e.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := reg.Env.Clusters[0]
	const ns = "atoll-members-probe"
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		t.Fatalf("nodes of %s: %v (%d)", c.Name, err, len(nodes.Items))
	}
	node := nodes.Items[0].Name

	// Allowed: the propagator makes a project namespace (server-side
	// apply, as it does), binds the aggregator's debug role there and
	// creates a Pod in it.
	prop := memberClient(t, c, clusters.Propagator, false)
	apply := metav1.PatchOptions{FieldManager: "atoll-propagator", Force: ptr.To(true)}
	nsDoc, _ := json.Marshal(&corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: ns}})
	if _, err := prop.CoreV1().Namespaces().Patch(ctx, ns, types.ApplyPatchType, nsDoc, apply); err != nil {
		t.Fatalf("propagator applies namespace %s: %v", ns, err)
	}
	rb, _ := json.Marshal(clusters.AggregatorDebugBinding(ns))
	if _, err := prop.RbacV1().RoleBindings(ns).Patch(ctx, clusters.AggregatorDebugRole, types.ApplyPatchType, rb, apply); err != nil {
		t.Fatalf("propagator binds the aggregator's debug role in %s: %v", ns, err)
	}
	fence, _ := json.Marshal(&admissionv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: clusters.FenceName},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{Validations: []admissionv1.Validation{{Expression: "true"}},
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
				Operations: []admissionv1.OperationType{admissionv1.Create},
				Rule:       admissionv1.Rule{APIGroups: []string{"batch"}, APIVersions: []string{"v1"}, Resources: []string{"jobs"}}}}}}},
	})
	dry := apply
	dry.DryRun = []string{metav1.DryRunAll}
	if _, err := prop.AdmissionregistrationV1().ValidatingAdmissionPolicies().Patch(ctx, clusters.FenceName, types.ApplyPatchType, fence, dry); err != nil {
		t.Errorf("propagator applies its cronjob fence (dry run): %v", err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
	if _, err := prop.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("propagator creates a pod in %s: %v", ns, err)
	}

	// Allowed: the aggregator reads the pod's log there, once it runs.
	agg := memberClient(t, c, clusters.Aggregator, false)
	marker := fmt.Sprintf("members-probe %d", time.Now().UnixNano())
	if err := testenv.AppendLog(reg.PodLogFile, marker); err != nil {
		t.Fatal(err)
	}
	var logs string
	for {
		p, err := agg.CoreV1().Pods(ns).Get(ctx, "probe", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("aggregator reads pod %s/probe: %v", ns, err)
		}
		if p.Status.Phase == corev1.PodRunning {
			rc, err := agg.CoreV1().Pods(ns).GetLogs("probe", &corev1.PodLogOptions{Container: "main"}).Stream(ctx)
			if err != nil {
				t.Fatalf("aggregator reads the log of %s/probe: %v", ns, err)
			}
			b, err := io.ReadAll(rc)
			_ = rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			if logs = string(b); strings.Contains(logs, marker) {
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pod %s/probe: phase %s, log %q without %q", ns, p.Status.Phase, logs, marker)
		case <-time.After(200 * time.Millisecond):
		}
	}
	// exec is a stream upgrade: asked of the authorizer instead.
	for _, tc := range []struct {
		ns    string
		allow bool
	}{{ns, true}, {"default", false}, {"kube-system", false}} {
		r, err := agg.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authzv1.ResourceAttributes{Namespace: tc.ns, Verb: "create", Resource: "pods", Subresource: "exec"}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed != tc.allow {
			t.Errorf("aggregator may exec in %s: %v, want %v", tc.ns, r.Status.Allowed, tc.allow)
		}
	}

	// A Secret in the tenant namespace, for remediation to try.
	if _, err := c.Client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}, StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Refused, each with 403.
	aggNo := memberClient(t, c, clusters.Aggregator, true)
	propNo := memberClient(t, c, clusters.Propagator, true)
	remNo := memberClient(t, c, clusters.Remediation, true)
	upNo := memberClient(t, c, clusters.Upgrade, true)
	deploy := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "evil"}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"a": "b"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}}
	evilPod := func() *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "evil"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	}
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"aggregator creates a Deployment", func() error {
			_, err := aggNo.AppsV1().Deployments(ns).Create(ctx, deploy, metav1.CreateOptions{})
			return err
		}},
		{"aggregator reads a Secret", func() error {
			_, err := aggNo.CoreV1().Secrets(ns).Get(ctx, "tenant", metav1.GetOptions{})
			return err
		}},
		{"aggregator reads a pod log outside project namespaces", func() error {
			_, err := aggNo.CoreV1().Pods("kube-system").GetLogs("any", &corev1.PodLogOptions{}).DoRaw(ctx)
			return err
		}},
		{"propagator deletes a Node", func() error {
			return propNo.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		}},
		{"propagator creates a pod in kube-system", func() error {
			_, err := propNo.CoreV1().Pods("kube-system").Create(ctx, evilPod(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
		{"propagator creates a namespace outside atoll-*", func() error {
			_, err := propNo.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "evil"}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
		{"propagator reads a Secret", func() error {
			_, err := propNo.CoreV1().Secrets(ns).Get(ctx, "tenant", metav1.GetOptions{})
			return err
		}},
		{"remediation reads a Secret in a tenant namespace", func() error {
			_, err := remNo.CoreV1().Secrets(ns).Get(ctx, "tenant", metav1.GetOptions{})
			return err
		}},
		{"remediation lists Secrets", func() error {
			_, err := remNo.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"remediation creates a pod in a tenant namespace", func() error {
			_, err := remNo.CoreV1().Pods(ns).Create(ctx, evilPod(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
		{"upgrade reads a Secret in a tenant namespace", func() error {
			_, err := upNo.CoreV1().Secrets(ns).Get(ctx, "tenant", metav1.GetOptions{})
			return err
		}},
		{"upgrade updates a Deployment", func() error {
			_, err := upNo.AppsV1().Deployments(ns).Create(ctx, deploy, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !apierrors.IsForbidden(err) {
				t.Errorf("got %v, want 403 Forbidden", err)
			}
		})
	}
	// The member cluster's audit log records the services' 403s (the
	// region's audit after the package reads it; these, refused on
	// purpose, it leaves out).
	for {
		b, err := os.ReadFile(filepath.Join(c.Dir(), "logs", "audit.log"))
		if err != nil {
			t.Fatalf("audit log of %s: %v", c.Name, err)
		}
		if bytes.Contains(b, []byte(`"userAgent":"`+testenv.ForbiddenAgentPrefix+`/remediation"`)) && bytes.Contains(b, []byte(`"code":403`)) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the audit log of %s holds no 403 of remediation's", c.Name)
		case <-time.After(200 * time.Millisecond):
		}
	}
	if f := reg.MemberForbidden(); len(f) > 0 {
		t.Errorf("services refused in member clusters: %q", f)
	}
	// Nothing was written by the refused calls.
	if _, err := c.Client.CoreV1().Namespaces().Get(ctx, "evil", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace evil: %v, want NotFound", err)
	}
	if _, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
		t.Errorf("node %s: %v", node, err)
	}
}
