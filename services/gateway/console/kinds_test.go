package console_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/api"
)

// TestEveryKindHasAConsoleView: the console's KIND_VIEWS (app.js) has an
// entry for every registered kind and for no other: a kind added to api
// without a thought for its page fails here. What applies to a kind
// (pods, operations) the console reads from GET /v1/kinds; the gateway's
// console_kinds_test.go drives a Scaler's page in a browser.
func TestEveryKindHasAConsoleView(t *testing.T) {
	js, err := os.ReadFile("static/app.js")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile(`(?s)\nconst KIND_VIEWS = \{\n(.*?)\n\};\n`).FindSubmatch(js)
	if block == nil {
		t.Fatal("app.js has no `const KIND_VIEWS = {...};` block")
	}
	var got []string
	for _, m := range regexp.MustCompile(`(?m)^  ([A-Za-z]+): \{`).FindAllSubmatch(block[1], -1) {
		got = append(got, string(m[1]))
	}
	if diff := cmp.Diff(api.KindNames(), got); diff != "" {
		t.Errorf("KIND_VIEWS' kinds, in order (-api.KindNames +app.js):\n%s", diff)
	}
	if !strings.Contains(string(js), "getJSON('/kinds'") {
		t.Error("app.js does not read GET /v1/kinds")
	}
}
