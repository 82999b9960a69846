package console_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestEveryElementTheScriptFindsIsInThePage: every element app.js looks
// up by a literal id ($('#x ...'), hide('#x'), showIn('#x', ...)) is in
// index.html, so a card whose markup is renamed or forgotten (the
// endpoints card's table, say) fails here rather than as a null in a
// browser; and an App's page draws its endpoints card from GET
// .../endpoints.
func TestEveryElementTheScriptFindsIsInThePage(t *testing.T) {
	js, err := os.ReadFile("static/app.js")
	if err != nil {
		t.Fatal(err)
	}
	html, err := os.ReadFile("static/index.html")
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, m := range regexp.MustCompile(`\bid="([^"]+)"`).FindAllSubmatch(html, -1) {
		ids[string(m[1])] = true
	}
	refs := regexp.MustCompile(`(?:\$|\bhide|\bshowIn)\('#([a-z0-9-]+)`).FindAllSubmatch(js, -1)
	if len(refs) < 100 {
		t.Fatalf("only %d element lookups found in app.js: has the pattern changed?", len(refs))
	}
	seen := map[string]bool{}
	for _, m := range refs {
		id := string(m[1])
		if !ids[id] && !seen[id] {
			t.Errorf("app.js looks up #%s, which index.html does not have", id)
		}
		seen[id] = true
	}
	for _, id := range []string{"endpoints-card", "endpoints-zones", "endpoints", "endpoints-meta", "endpoints-status", "endpoints-error", "endpoints-empty"} {
		if !seen[id] {
			t.Errorf("app.js never looks up #%s", id)
		}
	}
	if !strings.Contains(string(js), "App: { cards: ['rollout', 'endpoints']") || !strings.Contains(string(js), "getJSON(`${base}/endpoints`") {
		t.Error("an App's page does not draw its endpoints card from GET .../endpoints")
	}
}
