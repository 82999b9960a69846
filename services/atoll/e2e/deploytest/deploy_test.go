package deploytest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"

	"atoll.dev/libs/bus"
	"atoll.dev/libs/clusters"
	"atoll.dev/libs/envelope"
	"atoll.dev/libs/testenv"
)

// root is the repository's root, from this package's directory.
const root = "../../../.."

// services lists every service with a main (services/<s>/cmd/<s>), the
// atoll CLI excepted: each must be deployed.
func services(t *testing.T) []string {
	t.Helper()
	mains, err := filepath.Glob(filepath.Join(root, "services", "*", "cmd", "*", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range mains {
		name := filepath.Base(filepath.Dir(m))
		if name != "atoll" && filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(m)))) == name {
			out = append(out, name)
		}
	}
	if len(out) < 6 {
		t.Fatalf("found only %v under services/*/cmd", out)
	}
	return out
}

func kubectl(t *testing.T) string {
	t.Helper()
	dir, err := testenv.FindBinDir()
	if err != nil {
		t.Fatalf("bin dir: %v", err)
	}
	k := filepath.Join(dir, "kubectl")
	if _, err := os.Stat(k); err != nil {
		t.Fatalf("%v: run `make tools`", err)
	}
	return k
}

// build copies deploy/k8s, fills its secrets/ the way deploy/README.md
// says (the NATS users from bus.CreateAuth, the example tokens and member
// clusters, placeholder kubeconfigs) and returns `kubectl kustomize`'s
// output.
func build(t *testing.T) []byte {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "k8s")
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(root, "deploy", "k8s"))); err != nil {
		t.Fatal(err)
	}
	_ = os.RemoveAll(filepath.Join(dir, "secrets")) // an operator's own, if any
	if _, err := bus.CreateAuth(filepath.Join(dir, "secrets", "nats")); err != nil {
		t.Fatal(err)
	}
	auth, err := bus.LoadAuth(filepath.Join(dir, "secrets", "nats"))
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.WriteServerConfig(filepath.Join(dir, "secrets", "nats", "auth.conf")); err != nil {
		t.Fatal(err)
	}
	makeTLS(t, filepath.Join(dir, "secrets", "tls"))
	if err := envelope.GenerateKEK(filepath.Join(dir, "secrets", "kek"), "k1"); err != nil {
		t.Fatal(err)
	}
	copyFile(t, filepath.Join(root, "deploy", "tokens.example.yaml"), filepath.Join(dir, "secrets", "gateway", "tokens.yaml"))
	writeFile(t, filepath.Join(dir, "secrets", "canary", "config.yaml"), "server: https://atoll-gateway.atoll-system.svc\nproject: canary\ntoken: atl_example\n")
	for _, svc := range clusters.Services {
		copyFile(t, filepath.Join(root, "deploy", "clusters.example.yaml"), filepath.Join(dir, "secrets", "clusters", svc, "clusters.yaml"))
		for _, z := range []string{"a", "b", "c"} {
			writeFile(t, filepath.Join(dir, "secrets", "clusters", svc, "zone-"+z+".kubeconfig"), "apiVersion: v1\nkind: Config\n")
		}
	}
	out, err := exec.Command(kubectl(t), "kustomize", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize deploy/k8s: %v\n%s", err, out)
	}
	return out
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, to, string(b))
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// objects decodes the built manifests into typed objects.
func objects(t *testing.T, manifests []byte) []runtime.Object {
	t.Helper()
	var objs []runtime.Object
	for _, doc := range bytes.Split(manifests, []byte("\n---\n")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("decode %s: %v", firstLines(doc), err)
		}
		objs = append(objs, obj)
	}
	return objs
}

func firstLines(b []byte) string {
	lines := strings.SplitN(string(b), "\n", 4)
	return strings.Join(lines[:min(3, len(lines))], " | ")
}

// index groups the objects by kind and name (generated names without
// their hash suffix).
type index struct {
	deployments  map[string]*appsv1.Deployment
	statefulsets map[string]*appsv1.StatefulSet
	jobs         map[string]*batchv1.Job
	accounts     map[string]*corev1.ServiceAccount
	secrets      map[string]*corev1.Secret
	pdbs         []*policyv1.PodDisruptionBudget
	policies     []*networkingv1.NetworkPolicy
	namespaces   int
}

var hashSuffix = regexp.MustCompile(`-[a-z0-9]{10}$`)

func indexOf(t *testing.T, objs []runtime.Object) index {
	t.Helper()
	x := index{deployments: map[string]*appsv1.Deployment{}, statefulsets: map[string]*appsv1.StatefulSet{}, jobs: map[string]*batchv1.Job{},
		accounts: map[string]*corev1.ServiceAccount{}, secrets: map[string]*corev1.Secret{}}
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.Deployment:
			x.deployments[o.Name] = o
		case *appsv1.StatefulSet:
			x.statefulsets[o.Name] = o
		case *batchv1.Job:
			x.jobs[o.Name] = o
		case *corev1.ServiceAccount:
			x.accounts[o.Name] = o
		case *corev1.Secret:
			x.secrets[hashSuffix.ReplaceAllString(o.Name, "")] = o
		case *policyv1.PodDisruptionBudget:
			x.pdbs = append(x.pdbs, o)
		case *networkingv1.NetworkPolicy:
			x.policies = append(x.policies, o)
		case *corev1.Namespace:
			x.namespaces++
		}
	}
	return x
}

// podChecks are what every Pod template of the region must have.
func checkPod(t *testing.T, what string, x index, pod corev1.PodTemplateSpec, wantProbes bool) {
	t.Helper()
	spec := pod.Spec
	if spec.ServiceAccountName == "" || x.accounts[spec.ServiceAccountName] == nil {
		t.Errorf("%s: ServiceAccount %q is not in the manifests", what, spec.ServiceAccountName)
	}
	if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("%s: does not run as non-root", what)
	}
	for _, c := range spec.Containers {
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s/%s: needs CPU and memory requests and a memory limit, has %v", what, c.Name, c.Resources)
		}
		if wantProbes && (c.ReadinessProbe == nil || c.LivenessProbe == nil) {
			t.Errorf("%s/%s: needs readiness and liveness probes", what, c.Name)
		}
		// The images are tagged :latest by default, which the kubelet
		// would pull on every start (make k8s-up's node has no registry).
		if c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("%s/%s: imagePullPolicy %q, want IfNotPresent", what, c.Name, c.ImagePullPolicy)
		}
		if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
			t.Errorf("%s/%s: root filesystem not read-only", what, c.Name)
		}
	}
	for _, v := range spec.Volumes {
		if v.Secret != nil && x.secrets[hashSuffix.ReplaceAllString(v.Secret.SecretName, "")] == nil {
			t.Errorf("%s: volume %s mounts Secret %s, which is not in the manifests", what, v.Name, v.Secret.SecretName)
		}
	}
	// Some NetworkPolicy besides the namespace-wide ones must select the Pod.
	own := false
	for _, p := range x.policies {
		sel, err := metav1Selector(p)
		if err != nil {
			t.Fatal(err)
		}
		if !sel.Empty() && sel.Matches(labels.Set(pod.Labels)) {
			own = true
			if !slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) || !slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
				t.Errorf("%s: NetworkPolicy %s should govern both ingress and egress", what, p.Name)
			}
		}
	}
	if !own {
		t.Errorf("%s: no NetworkPolicy of its own", what)
	}
}

// Every service with a main has a complete, safe deployment, and the
// shared parts (NATS R3, the bootstrap, default deny) are there.
func TestManifestsPackageEveryService(t *testing.T) {
	manifests := build(t)
	x := indexOf(t, objects(t, manifests))
	kustomization, err := os.ReadFile(filepath.Join(root, "deploy", "k8s", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, svc := range services(t) {
		t.Run(svc, func(t *testing.T) {
			name := "atoll-" + svc
			d := x.deployments[name]
			if d == nil {
				t.Fatalf("no Deployment %s: add deploy/k8s/%s.yaml (copy scheduler.yaml) to deploy/k8s/kustomization.yaml", name, svc)
			}
			if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
				t.Errorf("replicas %v: a service runs at least 2", d.Spec.Replicas)
			}
			if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
				t.Errorf("a rollout may take a replica away before its successor is ready")
			}
			// The scheduler and propagator are ready before their caches
			// fill and take no lease until then: a rollout gives the new
			// replica time to fill before it stops the next old one.
			if (svc == "scheduler" || svc == "propagator") && d.Spec.MinReadySeconds < 5 {
				t.Errorf("minReadySeconds %d: a rollout may stop the last filled replica while its successor still fills", d.Spec.MinReadySeconds)
			}
			checkPod(t, name, x, d.Spec.Template, true)
			if !strings.Contains(string(kustomization), "name: atoll/"+svc+",") {
				t.Errorf("image atoll/%s not in kustomization.yaml's images", svc)
			}
			// Its own NATS user's Secret, mounted, and its variable pointing into it.
			secret := "atoll-nats-" + svc
			if x.secrets[secret] == nil || x.secrets[secret].Data[svc+".nk"] == nil {
				t.Errorf("no Secret %s holding %s.nk", secret, svc)
			}
			env := map[string]string{}
			for _, e := range d.Spec.Template.Spec.Containers[0].Env {
				env[e.Name] = e.Value
			}
			if env["ATOLL_NATS_CREDS"] != "/var/run/secrets/atoll/nats/"+svc+".nk" {
				t.Errorf("ATOLL_NATS_CREDS=%q, want its own user's file", env["ATOLL_NATS_CREDS"])
			}
			if env["ATOLL_ADMIN_LISTEN"] != ":9090" {
				t.Errorf("ATOLL_ADMIN_LISTEN=%q: the probes and Prometheus need :9090", env["ATOLL_ADMIN_LISTEN"])
			}
			if len(strings.Split(env["ATOLL_NATS_URL"], ",")) != 3 {
				t.Errorf("ATOLL_NATS_URL=%q should list the 3 NATS servers", env["ATOLL_NATS_URL"])
			}
			// Only variables the service reads (its main or libs/daemon's).
			files := []string{filepath.Join(root, "services", svc, "cmd", svc, "main.go"), filepath.Join(root, "libs", "daemon", "daemon.go")}
			if svc != "gateway" { // the services that hold leases name their replica (lease.InstanceEnv)
				files = append(files, filepath.Join(root, "libs", "bus", "lease", "lease.go"))
			}
			known := readVariables(t, files...)
			for v := range env {
				if !known[v] {
					t.Errorf("sets %s, which %s does not read (%s -h)", v, svc, svc)
				}
			}
			if svc != "gateway" && !instanceFromPodName(d.Spec.Template.Spec.Containers[0].Env) {
				t.Errorf("no ATOLL_INSTANCE from the pod's name: a restarted replica would wait a lease's TTL for its own leases")
			}
			pdb := false
			for _, p := range x.pdbs {
				if p.Spec.Selector != nil && labels.SelectorFromSet(p.Spec.Selector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)) {
					pdb = true
					if p.Spec.MinAvailable == nil || p.Spec.MinAvailable.IntValue() < 1 || p.Spec.MinAvailable.IntValue() >= int(*d.Spec.Replicas) {
						t.Errorf("PDB %s: minAvailable %v neither keeps one nor lets a drain through", p.Name, p.Spec.MinAvailable)
					}
				}
			}
			if !pdb {
				t.Errorf("no PodDisruptionBudget")
			}
		})
	}

	nats := x.statefulsets["nats"]
	if nats == nil || *nats.Spec.Replicas != 3 {
		t.Fatalf("NATS StatefulSet with 3 servers missing")
	}
	checkPod(t, "nats", x, nats.Spec.Template, true)
	job := x.jobs["atoll-bootstrap"]
	if job == nil {
		t.Fatal("bootstrap Job missing")
	}
	checkPod(t, "atoll-bootstrap", x, job.Spec.Template, false)
	if args := strings.Join(job.Spec.Template.Spec.Containers[0].Args, " "); !strings.Contains(args, "--replicas=3") || !strings.Contains(args, "admin.nk") {
		t.Errorf("bootstrap args %q: as the admin, R3", args)
	}
	deny := false
	for _, p := range x.policies {
		if len(p.Spec.PodSelector.MatchLabels) == 0 && len(p.Spec.PodSelector.MatchExpressions) == 0 && len(p.Spec.Ingress) == 0 && len(p.Spec.Egress) == 0 && len(p.Spec.PolicyTypes) == 2 {
			deny = true
		}
	}
	if !deny {
		t.Error("no default-deny NetworkPolicy")
	}
	if x.secrets["atoll-nats-admin"] == nil || x.secrets["atoll-gateway-auth"] == nil {
		t.Error("the admin's or the gateway's Secret is missing")
	}
	// Only the cluster-facing services get member credentials, each its
	// own Secret and no other's.
	for _, svc := range clusters.Services {
		if x.secrets["atoll-clusters-"+svc] == nil {
			t.Errorf("%s's member clusters' Secret is missing", svc)
		}
	}
	svcs := services(t)
	for name, d := range x.deployments {
		svc := strings.TrimPrefix(name, "atoll-")
		var mounts []string
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Secret != nil && strings.HasPrefix(v.Secret.SecretName, "atoll-clusters-") {
				name := v.Secret.SecretName // kustomize's content hash after the last dash
				mounts = append(mounts, name[:strings.LastIndex(name, "-")])
			}
		}
		var want []string // none for what is not a service (the canary)
		if slices.Contains(svcs, svc) && clusterFacing(t, svc) {
			want = []string{"atoll-clusters-" + svc}
			if !slices.Contains(clusters.Services, svc) {
				t.Errorf("%s loads the member clusters but is not in libs/clusters Services (no identity there)", svc)
			}
		}
		if diff := cmp.Diff(want, mounts); diff != "" {
			t.Errorf("%s mounts member credentials (-want +got):\n%s", name, diff)
		}
	}
}

// clusterFacing says whether a service reaches the member clusters: its
// main loads the member clusters file.
func clusterFacing(t *testing.T, svc string) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "services", svc, "cmd", svc, "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), "clusters.Load(")
}

var variable = regexp.MustCompile(`"(ATOLL_[A-Z0-9_]+)"`)

// instanceFromPodName reports whether env sets ATOLL_INSTANCE to the pod's
// name (the same across the container's restarts, unique among live pods).
func instanceFromPodName(env []corev1.EnvVar) bool {
	for _, e := range env {
		if e.Name == "ATOLL_INSTANCE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name" {
			return true
		}
	}
	return false
}

func readVariables(t *testing.T, files ...string) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range variable.FindAllStringSubmatch(string(b), -1) {
			known[m[1]] = true
		}
	}
	return known
}

// The canary runs beside the services, as a user of the gateway with its
// own CLI config, and serves the metrics Prometheus scrapes.
func TestManifestsDeployTheCanary(t *testing.T) {
	x := indexOf(t, objects(t, build(t)))
	d := x.deployments["atoll-canary"]
	if d == nil {
		t.Fatal("no Deployment atoll-canary: deploy/k8s/canary.yaml in deploy/k8s/kustomization.yaml")
	}
	pod := d.Spec.Template
	checkPod(t, d.Name, x, pod, true)
	c := pod.Spec.Containers[0]
	args := strings.Join(append(slices.Clone(c.Command), c.Args...), " ")
	for _, want := range []string{"/atoll canary ", "--metrics-listen :9464", "--zones "} {
		if !strings.Contains(args, want) {
			t.Errorf("command %q lacks %q", args, want)
		}
	}
	if a := pod.Annotations; a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != "9464" {
		t.Errorf("annotations %v: Prometheus would not scrape port 9464", a)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || (m.Name == "config" && strings.HasPrefix(env["ATOLL_CONFIG"], m.MountPath+"/"))
	}
	if !mounted {
		t.Errorf("ATOLL_CONFIG=%q is not in the mounted atoll-canary-config Secret", env["ATOLL_CONFIG"])
	}
	if x.secrets["atoll-canary-config"] == nil || x.secrets["atoll-canary-config"].Data["config.yaml"] == nil {
		t.Error("no Secret atoll-canary-config holding config.yaml")
	}
}

// A real kube-apiserver accepts every object of deploy/k8s: server-side
// apply, dry run, strict field validation.
func TestManifestsServerSideDryRun(t *testing.T) {
	manifests := build(t)
	env := testenv.New(t, testenv.ClusterSpec{Zone: "a", Name: "deploy"})
	kc := env.Clusters[0].Kubeconfig
	dir := t.TempDir()
	all := filepath.Join(dir, "all.yaml")
	writeFile(t, all, string(manifests))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(args ...string) string {
		cmd := exec.CommandContext(ctx, kubectl(t), append([]string{"--kubeconfig", kc}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// A dry run creates nothing, so the namespace the others go into is
	// created for real first.
	run("apply", "--server-side", "--field-manager=atoll-deploytest", "-f", filepath.Join(root, "deploy", "k8s", "namespace.yaml"))
	out := run("apply", "--server-side", "--dry-run=server", "--validate=strict", "--field-manager=atoll-deploytest", "-f", all)
	// Every object answered, none with a warning.
	applied := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasSuffix(line, "(server dry run)"):
			applied++
		case strings.TrimSpace(line) != "":
			t.Errorf("kubectl said: %s", line)
		}
	}
	docs := len(objects(t, manifests))
	if applied != docs {
		t.Errorf("%d objects applied in the dry run, the manifests have %d:\n%s", applied, docs, out)
	}
	t.Logf("server-side dry run accepted %d objects", applied)

	// The plain Prometheus (deploy/k8s/prometheus), beside it: its own
	// namespace, created for real first, then every object dry run.
	prom, err := exec.CommandContext(ctx, kubectl(t), "kustomize", filepath.Join(root, "deploy", "k8s", "prometheus")).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize deploy/k8s/prometheus: %v\n%s", err, prom)
	}
	promFile := filepath.Join(dir, "prometheus.yaml")
	writeFile(t, promFile, string(prom))
	run("create", "namespace", "atoll-monitoring")
	out = run("apply", "--server-side", "--dry-run=server", "--validate=strict", "--field-manager=atoll-deploytest", "-f", promFile)
	if got, want := strings.Count(out, "(server dry run)"), len(objects(t, prom)); got != want {
		t.Errorf("deploy/k8s/prometheus: %d objects applied in the dry run, it has %d:\n%s", got, want, out)
	}
}

// metav1Selector is a NetworkPolicy's pod selector as a labels.Selector.
func metav1Selector(p *networkingv1.NetworkPolicy) (labels.Selector, error) {
	sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
	if err != nil {
		return nil, fmt.Errorf("NetworkPolicy %s: %w", p.Name, err)
	}
	return sel, nil
}
