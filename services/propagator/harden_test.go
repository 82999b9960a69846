package propagator

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"atoll.dev/libs/api"
)

// hostileTemplate asks for everything a tenant may not have, as a
// workload that got past admission (or a platform admin's) would.
func hostileTemplate() api.PodTemplate {
	return api.PodTemplate{
		HostNetwork:    true,
		ServiceAccount: "cluster-admin",
		Volumes: []api.Volume{
			{Name: "root", HostPath: "/"},
			{Name: "scratch", EmptyDir: true},
			{Name: "big", EmptyDir: true, SizeLimit: "5Gi"},
		},
		InitContainers: []api.Container{{Name: "setup", Image: "busybox", Privileged: true}},
		Sidecars:       []api.Container{{Name: "atoll-log-shipper", Image: "shipper"}},
		Containers: []api.Container{{Name: "web", Image: "nginx", Privileged: true,
			VolumeMounts: []api.VolumeMount{{Name: "root", MountPath: "/host"}}}},
	}
}

// hostileWorkload is a workload of kind with hostileTemplate.
func hostileWorkload(kind string) *api.Workload {
	c := api.Common{Template: hostileTemplate()}
	var spec api.Spec
	switch kind {
	case api.KindApp:
		spec = &api.AppSpec{Common: c}
	case api.KindCronJob:
		spec = &api.CronJobSpec{Common: c, Schedule: "*/5 * * * *"}
	case api.KindDaemon:
		spec = &api.DaemonSpec{Common: c}
	case api.KindJobSet:
		spec = &api.JobSetSpec{Common: c, Parallelism: 1, Completions: 1}
	case api.KindPod:
		spec = &api.PodSpec{Common: c}
	case api.KindTrainingJob:
		spec = &api.TrainingJobSpec{Common: c, Workers: 2}
	}
	spec.Default()
	return &api.Workload{APIVersion: api.APIVersion, Kind: kind, Metadata: api.Metadata{Project: "p", Name: "w", Generation: 1}, Spec: spec}
}

// TestHardenEveryKind: whatever a workload of any kind asks for, its
// rendered pods carry no host network, host path, privileged container
// or chosen ServiceAccount, no ServiceAccount token, and the restricted
// securityContext on every container, the platform's sidecar and init
// containers included; scratch directories have a size limit.
func TestHardenEveryKind(t *testing.T) {
	kinds := newKinds()
	for _, level := range []string{PodSecurityRestricted, PodSecurityBaseline} {
		for name, k := range kinds {
			t.Run(level+"/"+name, func(t *testing.T) {
				w := hostileWorkload(name)
				p := &api.PlacementDecision{Key: w.Key(), Generation: 1, Shards: []api.Shard{{Cluster: "zone-a", Zone: "a", Replicas: 2, IndexEnd: 2}}}
				d := &desired{workload: w, kind: k, placement: p, hashes: map[string]string{}, podSecurity: level}
				o, err := d.render("zone-a")
				if err != nil {
					t.Fatal(err)
				}
				ps := podSpecOf(o.obj)
				if ps == nil {
					t.Fatalf("no pod spec found in %T: add it to podSpecOf", o.obj)
				}
				checkHardened(t, ps, level)
			})
		}
	}
}

func checkHardened(t *testing.T, ps *corev1.PodSpec, level string) {
	t.Helper()
	if ps.HostNetwork || ps.HostPID || ps.HostIPC {
		t.Errorf("host namespaces: network %v pid %v ipc %v", ps.HostNetwork, ps.HostPID, ps.HostIPC)
	}
	if ps.ServiceAccountName != "" || ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
		t.Errorf("service account %q, automount %v; want the default, no token", ps.ServiceAccountName, ps.AutomountServiceAccountToken)
	}
	nonRoot := level != PodSecurityBaseline
	wantPod := &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	if nonRoot {
		wantPod.RunAsNonRoot = ptr.To(true)
	}
	if diff := cmp.Diff(wantPod, ps.SecurityContext); diff != "" {
		t.Errorf("pod securityContext (-want +got):\n%s", diff)
	}
	wantSC := &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	if nonRoot {
		wantSC.RunAsNonRoot = ptr.To(true)
	}
	var names []string
	for _, c := range append(append([]corev1.Container{}, ps.InitContainers...), ps.Containers...) {
		names = append(names, c.Name)
		if diff := cmp.Diff(wantSC, c.SecurityContext); diff != "" {
			t.Errorf("container %s securityContext (-want +got):\n%s", c.Name, diff)
		}
	}
	if diff := cmp.Diff([]string{"setup", "atoll-log-shipper", "web"}, names); diff != "" {
		t.Errorf("containers (-want +got):\n%s", diff)
	}
	limits := map[string]string{}
	for _, v := range ps.Volumes {
		if v.HostPath != nil {
			t.Errorf("volume %s is a host path", v.Name)
		}
		if v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil {
			t.Errorf("volume %s: %+v, want an emptyDir with a size limit", v.Name, v.VolumeSource)
			continue
		}
		limits[v.Name] = v.EmptyDir.SizeLimit.String()
	}
	def := resource.MustParse(api.DefaultScratchSize)
	if diff := cmp.Diff(map[string]string{"root": def.String(), "scratch": def.String(), "big": "5Gi"}, limits); diff != "" {
		t.Errorf("emptyDir size limits (-want +got):\n%s", diff)
	}
}

// TestHardenKeepsPortsAndUserButNotHostPorts: harden refuses host ports
// and root as a user under restricted, and leaves the rest alone.
func TestHardenKeepsPortsAndUserButNotHostPorts(t *testing.T) {
	spec := corev1.PodSpec{Containers: []corev1.Container{{
		Name:            "a",
		Ports:           []corev1.ContainerPort{{ContainerPort: 8080, HostPort: 80, HostIP: "0.0.0.0"}},
		SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To(int64(0)), Privileged: ptr.To(true), Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}},
	}, {
		Name:            "b",
		SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To(int64(1000))},
	}}}
	harden(&spec, PodSecurityRestricted)
	want := []corev1.Container{{
		Name:  "a",
		Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
		SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
	}, {
		Name: "b",
		SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To(int64(1000)), RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
	}}
	if diff := cmp.Diff(want, spec.Containers); diff != "" {
		t.Errorf("containers (-want +got):\n%s", diff)
	}
}

// TestBaselineGrant: only the projects a platform admin granted baseline
// get it; every other project is restricted.
func TestBaselineGrant(t *testing.T) {
	s, err := NewWithConfig(nil, quietLog(), nil, &Config{BaselineProjects: []string{"legacy"}})
	if err != nil {
		t.Fatal(err)
	}
	for project, want := range map[string]string{"legacy": PodSecurityBaseline, "web": PodSecurityRestricted, "": PodSecurityRestricted} {
		if got := s.podSecurityLevel(project); got != want {
			t.Errorf("level of %q: %s, want %s", project, got, want)
		}
	}
	s, err = NewWithConfig(nil, quietLog(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.podSecurityLevel("legacy"); got != PodSecurityRestricted {
		t.Errorf("without a configuration: %s, want restricted", got)
	}
}
