package gateway_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/browsertest"
	"atoll.dev/libs/bus"
	"atoll.dev/services/gateway"
)

// TestConsoleSecretPage: a Secret's page shows its keys, version, digest,
// writer and time, and nothing of its sealed values is in the page.
func TestConsoleSecretPage(t *testing.T) {
	browsertest.Skip(t)
	g := newTestGateway(t, gateway.Config{RatePerSecond: 1000, Burst: 1000})
	ctx := t.Context()
	ciphertext := []byte("console-ciphertext-marker-0123456789")
	at := time.Now().UTC().Add(-time.Hour)
	w := &api.Workload{APIVersion: api.APIVersion, Kind: api.KindSecret,
		Metadata: api.Metadata{Project: "p", Name: "db", Generation: 3, UID: "uid-secret", Created: at, Updated: at},
		Spec: &api.SecretSpec{Keys: []string{"PASSWORD", "TOKEN"}, Digest: "9f86d081884c7d65", Version: 2, UpdatedBy: "alice", Updated: at,
			Sealed: &api.SealedData{KeyID: "k1", WrappedKey: []byte("wrapped-key-marker"), Nonce: []byte("nonce"), Ciphertext: ciphertext}}}
	kv, err := g.Bus.KV(ctx, bus.BucketWorkloads)
	require.NoError(t, err)
	b, _ := json.Marshal(w)
	_, err = kv.Put(ctx, w.Key(), b)
	require.NoError(t, err)

	tab := consoleTab(t)
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		c, cancel := context.WithTimeout(tab, 30*time.Second)
		defer cancel()
		require.NoError(t, chromedp.Do(c, steps...), what)
	}
	run("sign in",
		chromedp.Navigate(g.URL+"/console/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), g.Admin),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#whoami")),
	)
	_, err = chromedp.Run(tab, chromedp.Evaluate[string](`(location.hash = '#/p/p/Secret/db')`))
	require.NoError(t, err)
	card := `#kind-cards .card[data-card="secret"]`
	c, cancel := context.WithTimeout(tab, 30*time.Second)
	defer cancel()
	_, err = chromedp.Run(c, chromedp.Poll[bool](`(() => { const c = document.querySelector('`+card+`');
		return document.querySelector('#detail-title').textContent === 'Secret db' && !!c && !c.hidden; })()`, chromedp.WithPollingInterval(100*time.Millisecond)))
	require.NoError(t, err, "the Secret's card")
	for field, want := range map[string]string{"keys": "PASSWORD, TOKEN", "version": "2", "digest": "9f86d081884c7d65", "updated-by": "alice"} {
		got, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.querySelector('`+card+` dd[data-field="`+field+`"]').innerText`))
		require.NoError(t, err, field)
		assert.Equal(t, want, got, field)
	}
	written, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.querySelector('`+card+` dd[data-field="updated"]').innerText`))
	require.NoError(t, err)
	assert.Contains(t, written, "ago")
	assert.True(t, hidden(t, tab, "#logs-card"), "a Secret has no logs")
	page, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
	require.NoError(t, err)
	for _, x := range []string{string(ciphertext), base64.StdEncoding.EncodeToString(ciphertext), base64.StdEncoding.EncodeToString([]byte("wrapped-key-marker"))} {
		assert.NotContains(t, page, x)
	}
	screenshot(t, tab, "secret-page.png")
}
