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
