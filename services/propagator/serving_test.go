package propagator

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
)

// servingTemplate has every part of the container model set.
func servingTemplate() api.PodTemplate {
	return api.PodTemplate{
		TerminationGracePeriodSeconds: ptr.To(int64(45)),
		InitContainers:                []api.Container{{Name: "init", Image: "busybox"}},
		Containers: []api.Container{{
			Name: "web", Image: "nginx", WorkingDir: "/srv",
			Env:            []api.EnvVar{{Name: "MODE", Value: "$(ATOLL_ZONE)"}},
			Ports:          []api.Port{{Name: "http", ContainerPort: 8080, AppProtocol: "http"}},
			ReadinessProbe: &api.Probe{HTTPGet: &api.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}, PeriodSeconds: 2},
			LivenessProbe:  &api.Probe{TCPSocket: &api.TCPSocketAction{Port: intstr.FromInt32(8080)}},
			StartupProbe:   &api.Probe{GRPC: &api.GRPCAction{Port: 9000, Service: "up"}, FailureThreshold: 30},
			Lifecycle: &api.Lifecycle{
				PostStart: &api.LifecycleHandler{Exec: &api.ExecAction{Command: []string{"warm"}}},
				PreStop:   &api.LifecycleHandler{Sleep: &api.SleepAction{Seconds: 10}},
			},
		}},
	}
}

// TestEveryKindServesAndKnowsItself: whatever the kind, the rendered
// pods carry the template's probes, hooks, working directory and grace
// period, and the platform's identity in every container and the labels.
func TestEveryKindServesAndKnowsItself(t *testing.T) {
	sh := api.Shard{Cluster: "zone-b", Zone: "b", Replicas: 2, IndexStart: 0, IndexEnd: 2}
	specs := map[string]api.Spec{
		api.KindApp:         &api.AppSpec{Common: api.Common{Template: servingTemplate()}},
		api.KindJobSet:      &api.JobSetSpec{Common: api.Common{Template: servingTemplate()}, Completions: 2},
		api.KindPod:         &api.PodSpec{Common: api.Common{Template: servingTemplate()}},
		api.KindCronJob:     &api.CronJobSpec{Common: api.Common{Template: servingTemplate()}, Schedule: "* * * * *"},
		api.KindDaemon:      &api.DaemonSpec{Common: api.Common{Template: servingTemplate()}},
		api.KindTrainingJob: &api.TrainingJobSpec{Common: api.Common{Template: servingTemplate()}, Workers: 2},
	}
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}
	}
	for kind := range newKinds() {
		t.Run(kind, func(t *testing.T) {
			s := specs[kind]
			if s == nil {
				t.Fatalf("no spec for kind %s in this test", kind)
			}
			s.Default()
			w := &api.Workload{APIVersion: api.APIVersion, Kind: kind, Metadata: api.Metadata{Project: "shop", Name: "web", Generation: 1}, Spec: s}
			d := &desired{workload: w, kind: newKinds()[kind], region: "eu-west", hashes: map[string]string{},
				placement: &api.PlacementDecision{Key: w.Key(), Generation: 1, Shards: []api.Shard{sh}}}
			o, err := d.render(sh.Cluster)
			if err != nil {
				t.Fatal(err)
			}
			m, spec := podOf(o.obj)
			if spec == nil {
				t.Fatalf("%T has no pods", o.obj)
			}
			identity := []corev1.EnvVar{
				{Name: "ATOLL_REGION", Value: "eu-west"}, {Name: "ATOLL_ZONE", Value: "b"}, {Name: "ATOLL_CLUSTER", Value: "zone-b"},
				{Name: "ATOLL_PROJECT", Value: "shop"}, {Name: "ATOLL_KIND", Value: kind}, {Name: "ATOLL_WORKLOAD", Value: "web"},
				{Name: "POD_NAME", ValueFrom: field("metadata.name")}, {Name: "POD_NAMESPACE", ValueFrom: field("metadata.namespace")},
				{Name: "POD_IP", ValueFrom: field("status.podIP")}, {Name: "NODE_NAME", ValueFrom: field("spec.nodeName")},
			}
			var web *corev1.Container
			for i, c := range append(spec.InitContainers, spec.Containers...) {
				if diff := cmp.Diff(identity, c.Env[:min(len(identity), len(c.Env))]); diff != "" {
					t.Errorf("container %d (%s) identity (-want +got):\n%s", i, c.Name, diff)
				}
				if c.Name == "web" {
					web = &c
				}
			}
			if web == nil {
				t.Fatal("no container web")
			}
			if i := slices.IndexFunc(web.Env, func(e corev1.EnvVar) bool { return e.Name == "MODE" }); i < len(identity) {
				t.Errorf("the user's variable is at %d, not after the identity", i)
			}
			want := corev1.Container{
				WorkingDir:     "/srv",
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http"), Scheme: corev1.URISchemeHTTP}}, PeriodSeconds: 2},
				LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}},
				StartupProbe:   &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9000, Service: ptr.To("up")}}, FailureThreshold: 30},
				Lifecycle: &corev1.Lifecycle{
					PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"warm"}}},
					PreStop:   &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 10}},
				},
			}
			got := corev1.Container{WorkingDir: web.WorkingDir, ReadinessProbe: web.ReadinessProbe, LivenessProbe: web.LivenessProbe, StartupProbe: web.StartupProbe, Lifecycle: web.Lifecycle}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("serving model (-want +got):\n%s", diff)
			}
			if g := spec.TerminationGracePeriodSeconds; g == nil || *g != 45 {
				t.Errorf("grace period %v, want 45", g)
			}
			for k, v := range map[string]string{api.LabelProject: "shop", api.LabelKind: api.KindLabel(kind), api.LabelWorkload: "web", api.LabelZone: "b"} {
				if m.Labels[k] != v {
					t.Errorf("label %s = %q, want %q", k, m.Labels[k], v)
				}
			}
		})
	}
}

// TestGraceDefault: a template without a grace period keeps the default.
func TestGraceDefault(t *testing.T) {
	w := workload(api.KindApp, api.Control{})
	sh := api.Shard{Cluster: "zone-a", Zone: "a", Replicas: 1}
	d := &desired{workload: w, kind: appKind{}, hashes: map[string]string{}, placement: &api.PlacementDecision{Key: w.Key(), Generation: 3, Shards: []api.Shard{sh}}}
	o, err := d.render("zone-a")
	if err != nil {
		t.Fatal(err)
	}
	_, spec := podOf(o.obj)
	if g := spec.TerminationGracePeriodSeconds; g == nil || *g != api.DefaultTerminationGracePeriodSeconds {
		t.Errorf("grace period %v, want %d", g, api.DefaultTerminationGracePeriodSeconds)
	}
}
