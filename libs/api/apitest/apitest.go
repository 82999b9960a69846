// Package apitest holds workload documents shared by the tests of several modules.
package apitest

import (
	"fmt"
	"runtime"
	"runtime/metrics"
	"strings"

	"atoll.dev/libs/api"
)

// BadSpecs are workload documents each rejected with the given field and
// code: the api tests validate them, the admission tests submit them.
var BadSpecs = []struct {
	Name, Doc, Field, Code string
}{
	{"bad name", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"Web_1"},"spec":{"template":{"containers":[{"name":"a","image":"x"}]}}}`, "metadata.name", api.CodeInvalid},
	{"name too long", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"` + strings.Repeat("a", 64) + `"},"spec":{"template":{"containers":[{"name":"a","image":"x"}]}}}`, "metadata.name", api.CodeInvalid},
	{"missing name", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p"},"spec":{"template":{"containers":[{"name":"a","image":"x"}]}}}`, "metadata.name", api.CodeRequired},
	{"bad project", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"P!","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x"}]}}}`, "metadata.project", api.CodeInvalid},
	{"negative replicas", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"replicas":-1,"template":{"containers":[{"name":"a","image":"x"}]}}}`, "spec.replicas", api.CodeInvalid},
	{"missing image", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a"}]}}}`, "spec.template.containers[0].image", api.CodeRequired},
	{"empty containers", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[]}}}`, "spec.template.containers", api.CodeRequired},
	{"absurd cpu", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x","resources":{"requests":{"cpu":"100000"}}}]}}}`, "spec.template.containers[0].resources.requests.cpu", api.CodeTooLarge},
	{"absurd memory", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x","resources":{"requests":{"memory":"900Pi"}}}]}}}`, "spec.template.containers[0].resources.requests.memory", api.CodeTooLarge},
	{"not a quantity", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x","resources":{"requests":{"cpu":"lots"}}}]}}}`, "spec.template.containers[0].resources.requests.cpu", api.CodeInvalid},
	{"unknown field", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"replicaz":3,"template":{"containers":[{"name":"a","image":"x"}]}}}`, "spec.replicaz", api.CodeUnknown},
	{"wrong type", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"replicas":"three","template":{"containers":[{"name":"a","image":"x"}]}}}`, "spec.replicas", api.CodeType},
	{"unknown kind", `{"apiVersion":"atoll.dev/v1","kind":"VM","metadata":{"project":"p","name":"w"},"spec":{}}`, "kind", api.CodeUnsupported},
	{"bad tier", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"tier":"Gold","template":{"containers":[{"name":"a","image":"x"}]}}}`, "spec.tier", api.CodeUnsupported},
	{"bad port", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x","ports":[{"containerPort":70000}]}]}}}`, "spec.template.containers[0].ports[0].containerPort", api.CodeInvalid},
	{"probe without a handler", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x","readinessProbe":{"periodSeconds":5}}]}}}`, "spec.template.containers[0].readinessProbe", api.CodeRequired},
	{"probe with two handlers", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x","livenessProbe":{"exec":{"command":["true"]},"tcpSocket":{"port":80}}}]}}}`, "spec.template.containers[0].livenessProbe", api.CodeInvalid},
	{"probe on an unknown port name", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x","readinessProbe":{"httpGet":{"path":"/","port":"web"}}}]}}}`, "spec.template.containers[0].readinessProbe.httpGet.port", api.CodeInvalid},
	{"startup probe success threshold", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x","startupProbe":{"grpc":{"port":9000},"successThreshold":2}}]}}}`, "spec.template.containers[0].startupProbe.successThreshold", api.CodeInvalid},
	{"hook without a handler", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x","lifecycle":{"preStop":{}}}]}}}`, "spec.template.containers[0].lifecycle.preStop", api.CodeRequired},
	{"probe on an init container", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"initContainers":[{"name":"i","image":"x","readinessProbe":{"exec":{"command":["true"]}}}],"containers":[{"name":"a","image":"x"}]}}}`, "spec.template.initContainers[0].readinessProbe", api.CodeInvalid},
	{"port name too long", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x","ports":[{"name":"a-very-long-port-name","containerPort":80}]}]}}}`, "spec.template.containers[0].ports[0].name", api.CodeInvalid},
	{"duplicate port name", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x","ports":[{"name":"http","containerPort":80}]},{"name":"b","image":"x","ports":[{"name":"http","containerPort":81}]}]}}}`, "spec.template.containers[1].ports[0].name", api.CodeDuplicate},
	{"grace period over the maximum", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"terminationGracePeriodSeconds":301,"containers":[{"name":"a","image":"x"}]}}}`, "spec.template.terminationGracePeriodSeconds", api.CodeTooLarge},
	{"relative working dir", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x","workingDir":"srv"}]}}}`, "spec.template.containers[0].workingDir", api.CodeInvalid},
	{"identity variable", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x","env":[{"name":"ATOLL_ZONE","value":"mine"}]}]}}}`, "spec.template.containers[0].env[0].name", api.CodeInvalid},
	{"downward identity variable", `{"apiVersion":"atoll.dev/v1","kind":"JobSet","metadata":{"project":"p","name":"j"},"spec":{"template":{"containers":[{"name":"a","image":"x","env":[{"name":"POD_IP","value":"1.2.3.4"}]}]}}}`, "spec.template.containers[0].env[0].name", api.CodeInvalid},
	{"duplicate container", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x"},{"name":"a","image":"y"}]}}}`, "spec.template.containers[1].name", api.CodeDuplicate},
	{"parallelism over completions", `{"apiVersion":"atoll.dev/v1","kind":"JobSet","metadata":{"project":"p","name":"j"},"spec":{"parallelism":8,"completions":4,"template":{"containers":[{"name":"a","image":"x"}]}}}`, "spec.parallelism", api.CodeInvalid},
	{"request above limit", `{"apiVersion":"atoll.dev/v1","kind":"Pod","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x","resources":{"requests":{"cpu":"2"},"limits":{"cpu":"1"}}}]}}}`, "spec.template.containers[0].resources.requests.cpu", api.CodeInvalid},
	{"wrong api version", `{"apiVersion":"v2","kind":"Pod","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x"}]}}}`, "apiVersion", api.CodeUnsupported},
	{"chosen service account", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"serviceAccount":"admin","containers":[{"name":"a","image":"x"}]}}}`, "spec.template.serviceAccount", api.CodeInvalid},
	{"huge scratch", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"volumes":[{"name":"s","emptyDir":true,"sizeLimit":"10Ti"}],"containers":[{"name":"a","image":"x"}]}}}`, "spec.template.volumes[0].sizeLimit", api.CodeTooLarge},
	{"claim template without storage", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"volumeClaimTemplates":[{"name":"data"}],"containers":[{"name":"a","image":"x"}]}}}`, "spec.template.volumeClaimTemplates[0].storage", api.CodeRequired},
	{"claim template on a Pod", `{"apiVersion":"atoll.dev/v1","kind":"Pod","metadata":{"project":"p","name":"w"},"spec":{"template":{"volumeClaimTemplates":[{"name":"data","storage":"1Gi"}],"containers":[{"name":"a","image":"x"}]}}}`, "spec.template.volumeClaimTemplates", api.CodeUnsupported},
	{"malformed json", `{"apiVersion":`, "", api.CodeInvalid},
}

// ServingApp is an App as a team writes one, at generation 1: two
// containers with commands, environment and resources, and labels. The
// memory tests of the services' caches hold thousands of them.
func ServingApp(project, name string) *api.Workload {
	replicas := int32(3)
	spec := &api.AppSpec{Replicas: &replicas}
	for _, c := range []string{"server", "metrics"} {
		ctr := api.Container{Name: c, Image: "registry.example/" + c + ":1.4.2",
			Command:   []string{"/bin/" + c, "--listen=:8080", "--log-level=info"},
			Resources: api.Resources{Requests: api.ResourceList{CPU: "500m", Memory: "512Mi"}}}
		for i := range 8 {
			ctr.Env = append(ctr.Env, api.EnvVar{Name: fmt.Sprintf("SETTING_%d", i), Value: fmt.Sprintf("value-%d-%s", i, name)})
		}
		spec.Template.Containers = append(spec.Template.Containers, ctr)
	}
	return &api.Workload{APIVersion: api.APIVersion, Kind: api.KindApp,
		Metadata: api.Metadata{Project: project, Name: name, Generation: 1,
			Labels: map[string]string{"team": "checkout", "tier": "web", "app": name}},
		Spec: spec}
}

// ScannableHeap is the heap the garbage collector scans, in bytes, after
// a collection: what a cache of pointer-rich values costs every
// collection, which a cache of bytes does not.
func ScannableHeap() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/scan/heap:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
