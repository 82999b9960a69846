// Package apitest holds workload documents shared by the tests of several modules.
package apitest

import (
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
	{"duplicate container", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x"},{"name":"a","image":"y"}]}}}`, "spec.template.containers[1].name", api.CodeDuplicate},
	{"parallelism over completions", `{"apiVersion":"atoll.dev/v1","kind":"JobSet","metadata":{"project":"p","name":"j"},"spec":{"parallelism":8,"completions":4,"template":{"containers":[{"name":"a","image":"x"}]}}}`, "spec.parallelism", api.CodeInvalid},
	{"request above limit", `{"apiVersion":"atoll.dev/v1","kind":"Pod","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x","resources":{"requests":{"cpu":"2"},"limits":{"cpu":"1"}}}]}}}`, "spec.template.containers[0].resources.requests.cpu", api.CodeInvalid},
	{"wrong api version", `{"apiVersion":"v2","kind":"Pod","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x"}]}}}`, "apiVersion", api.CodeUnsupported},
	{"chosen service account", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"serviceAccount":"admin","containers":[{"name":"a","image":"x"}]}}}`, "spec.template.serviceAccount", api.CodeInvalid},
	{"huge scratch", `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"volumes":[{"name":"s","emptyDir":true,"sizeLimit":"10Ti"}],"containers":[{"name":"a","image":"x"}]}}}`, "spec.template.volumes[0].sizeLimit", api.CodeTooLarge},
	{"malformed json", `{"apiVersion":`, "", api.CodeInvalid},
}
