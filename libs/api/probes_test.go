package api_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
)

// TestServingContainersAccepted: the container model of a real service
// passes validation in every form the documentation shows.
func TestServingContainersAccepted(t *testing.T) {
	for _, tc := range []struct{ name, template string }{
		{"http probes on a named port", `"containers":[{"name":"a","image":"x","ports":[{"name":"http","containerPort":8080,"appProtocol":"http"}],"readinessProbe":{"httpGet":{"path":"/ready","port":"http"},"periodSeconds":2},"livenessProbe":{"httpGet":{"port":8080,"scheme":"HTTPS"}},"startupProbe":{"tcpSocket":{"port":"http"},"failureThreshold":30}}]`},
		{"grpc and exec probes", `"containers":[{"name":"a","image":"x","readinessProbe":{"grpc":{"port":9000,"service":"x"}},"livenessProbe":{"exec":{"command":["cat","/tmp/ok"]}}}]`},
		{"hooks, grace period at the maximum, working dir", `"terminationGracePeriodSeconds":300,"containers":[{"name":"a","image":"x","workingDir":"/srv","lifecycle":{"postStart":{"exec":{"command":["true"]}},"preStop":{"sleep":{"seconds":10}}}}]`},
		{"grace period zero", `"terminationGracePeriodSeconds":0,"containers":[{"name":"a","image":"x"}]`},
		{"same port number, different names", `"containers":[{"name":"a","image":"x","ports":[{"name":"dns-tcp","containerPort":53},{"name":"dns-udp","containerPort":53,"protocol":"UDP"}]}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{` + tc.template + `}}}`
			if fe := decodeAndValidate(doc); len(fe) > 0 {
				t.Fatalf("rejected: %v", fe)
			}
		})
	}
}

// TestPortNames: Kubernetes' IANA_SVC_NAME rule.
func TestPortNames(t *testing.T) {
	for name, want := range map[string]bool{
		"http": true, "h2c": true, "metrics-9090": true, "a": true,
		"": false, "8080": false, "-http": false, "http-": false, "ht--tp": false,
		"HTTP": false, "http_alt": false, "abcdefghijklmnop": false, "abcdefghijklmno": true,
	} {
		if got := api.IsPortName(name); got != want {
			t.Errorf("IsPortName(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestEveryIdentityVariableIsRefused: each of the platform's variables,
// set by a user, is one Invalid error (a 422) naming the field.
func TestEveryIdentityVariableIsRefused(t *testing.T) {
	for _, name := range api.IdentityEnv {
		t.Run(name, func(t *testing.T) {
			doc := `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"template":{"containers":[{"name":"a","image":"x","env":[{"name":"OK","value":"1"},{"name":"` + name + `","value":"x"}]}]}}}`
			var got []string
			for _, e := range decodeAndValidate(doc) {
				got = append(got, e.Field+" "+e.Code)
			}
			if diff := cmp.Diff([]string{"spec.template.containers[0].env[1].name Invalid"}, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

// TestGracePeriodWithinThePlatformsMaximum: the maximum grace period is
// the platform's (api.Limits, admission's flag): a template over it, or a
// hook's sleep over it, is 422 TooLarge naming the field and the maximum;
// at the maximum it passes; a raised maximum lets more through; every
// kind with a template is held to it.
func TestGracePeriodWithinThePlatformsMaximum(t *testing.T) {
	doc := func(kind, spec, template string) string {
		return `{"apiVersion":"atoll.dev/v1","kind":"` + kind + `","metadata":{"project":"p","name":"w"},"spec":{` + spec + `"template":{` + template + `}}}`
	}
	grace := func(n string) string {
		return `"terminationGracePeriodSeconds":` + n + `,"containers":[{"name":"a","image":"x"}]`
	}
	sleep := func(n string) string {
		return `"containers":[{"name":"a","image":"x","lifecycle":{"preStop":{"sleep":{"seconds":` + n + `}}}}]`
	}
	const field = "spec.template.terminationGracePeriodSeconds"
	for _, tc := range []struct {
		name string
		max  int64 // 0: api.DefaultLimits
		doc  string
		want []string // "field code: message"
	}{
		{"default maximum, at it", 0, doc("App", "", grace("300")), nil},
		{"default maximum, over it", 0, doc("App", "", grace("301")),
			[]string{field + " TooLarge: 301 exceeds the platform's maximum of 300 seconds"}},
		{"lowered maximum", 60, doc("App", "", grace("61")),
			[]string{field + " TooLarge: 61 exceeds the platform's maximum of 60 seconds"}},
		{"lowered maximum, at it", 60, doc("App", "", grace("60")), nil},
		{"raised maximum", 900, doc("App", "", grace("600")), nil},
		{"raised maximum, over it", 900, doc("App", "", grace("901")),
			[]string{field + " TooLarge: 901 exceeds the platform's maximum of 900 seconds"}},
		{"negative, whatever the maximum", 900, doc("App", "", grace("-1")), []string{field + " Invalid: -1 is negative"}},
		{"unset", 60, doc("App", "", `"containers":[{"name":"a","image":"x"}]`), nil},
		{"a JobSet too", 60, doc("JobSet", "", grace("120")),
			[]string{field + " TooLarge: 120 exceeds the platform's maximum of 60 seconds"}},
		{"a Pod too", 60, doc("Pod", "", grace("120")),
			[]string{field + " TooLarge: 120 exceeds the platform's maximum of 60 seconds"}},
		{"a preStop sleep over it", 60, doc("App", "", sleep("90")),
			[]string{"spec.template.containers[0].lifecycle.preStop.sleep.seconds TooLarge: 90 exceeds the platform's maximum grace period of 60 seconds"}},
		{"a preStop sleep under a raised maximum", 900, doc("App", "", sleep("400")), nil},
		{"a preStop sleep of zero", 900, doc("App", "", sleep("0")),
			[]string{"spec.template.containers[0].lifecycle.preStop.sleep.seconds Invalid: 0 is less than 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := api.Decode([]byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			w.Spec.Default()
			l := api.DefaultLimits()
			if tc.max != 0 {
				l.MaxTerminationGracePeriodSeconds = tc.max
			}
			var got []string
			for _, e := range api.ValidateWith(w, l) {
				got = append(got, e.Field+" "+e.Code+": "+e.Reason)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
	if got := api.DefaultLimits().MaxTerminationGracePeriodSeconds; got != 300 {
		t.Errorf("the default maximum is %d, want 300", got)
	}
}
