package cli

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDocuments(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"one", "a: 1\n", []string{"a: 1\n"}},
		{"two", "a: 1\n---\nb: 2\n", []string{"a: 1\n", "b: 2\n"}},
		{"leading separator and comments", "---\n# only a comment\n---\na: 1\n---   \n", []string{"a: 1\n"}},
		{"none", "# nothing\n", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			docs, err := documents(strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range docs {
				got = append(got, string(d))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("documents (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWithProject(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"kind":"App","metadata":{"name":"w"}}`, `{"kind":"App","metadata":{"name":"w","project":"p"}}`},
		{`{"kind":"App","metadata":{"name":"w","project":"mine"}}`, `{"kind":"App","metadata":{"name":"w","project":"mine"}}`},
		{`{"kind":"App"}`, `{"kind":"App","metadata":{"project":"p"}}`},
	}
	for _, tc := range tests {
		if got := string(withProject([]byte(tc.in), "p")); got != tc.want {
			t.Errorf("withProject(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
