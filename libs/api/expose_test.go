package api_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
)

// TestExposeValidation: every mistake in spec.expose is one error naming
// its field; a valid exposure passes, its path defaulted to "/".
func TestExposeValidation(t *testing.T) {
	const ports = `"ports":[{"name":"http","containerPort":8080},{"name":"dns","containerPort":53,"protocol":"UDP"}]`
	for _, tc := range []struct {
		name, expose string
		want         []string
	}{
		{"valid, default path", `{"host":"web.example.com","port":"http"}`, nil},
		{"valid, path", `{"host":"a.b","path":"/api/v1","port":"http"}`, nil},
		{"single-label host", `{"host":"intranet","port":"http"}`, nil},
		{"no host", `{"port":"http"}`, []string{"spec.expose.host Required"}},
		{"upper-case host", `{"host":"Web.example.com","port":"http"}`, []string{"spec.expose.host Invalid"}},
		{"wildcard host", `{"host":"*.example.com","port":"http"}`, []string{"spec.expose.host Invalid"}},
		{"host with a port", `{"host":"web.example.com:80","port":"http"}`, []string{"spec.expose.host Invalid"}},
		{"relative path", `{"host":"a.b","path":"api","port":"http"}`, []string{"spec.expose.path Invalid"}},
		{"dot segment", `{"host":"a.b","path":"/a/../b","port":"http"}`, []string{"spec.expose.path Invalid"}},
		{"space in path", `{"host":"a.b","path":"/a b","port":"http"}`, []string{"spec.expose.path Invalid"}},
		{"no port", `{"host":"a.b"}`, []string{"spec.expose.port Required"}},
		{"unknown port", `{"host":"a.b","port":"grpc"}`, []string{"spec.expose.port Invalid"}},
		{"udp port", `{"host":"a.b","port":"dns"}`, []string{"spec.expose.port Invalid"}},
		{"everything wrong", `{"host":"-x","path":"x","port":"y"}`, []string{"spec.expose.host Invalid", "spec.expose.path Invalid", "spec.expose.port Invalid"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"expose":` + tc.expose + `,"template":{"containers":[{"name":"a","image":"x",` + ports + `}]}}}`
			var got []string
			for _, e := range decodeAndValidate(doc) {
				got = append(got, e.Field+" "+e.Code)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

// TestExposeDefaultPath: an exposure without a path routes "/".
func TestExposeDefaultPath(t *testing.T) {
	w, err := api.Decode([]byte(`{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"project":"p","name":"w"},"spec":{"expose":{"host":"a.b","port":"http"},"template":{"containers":[{"name":"a","image":"x","ports":[{"name":"http","containerPort":80}]}]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	w.Spec.Default()
	if got := w.Spec.(*api.AppSpec).Expose.Path; got != "/" {
		t.Errorf("path = %q, want /", got)
	}
	if got := api.HostOf(w); got != "a.b" {
		t.Errorf("HostOf = %q, want a.b", got)
	}
}
