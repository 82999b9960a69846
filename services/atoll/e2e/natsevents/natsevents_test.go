package natsevents

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/sdk"
	"atoll.dev/services/atoll/e2e"
)

// natsCLI finds the NATS CLI: $ATOLL_BIN_DIR/nats, the repository's
// bin/nats (make tools), else PATH.
func natsCLI(t *testing.T) string {
	t.Helper()
	for _, p := range []string{filepath.Join(os.Getenv("ATOLL_BIN_DIR"), "nats"), filepath.Join("..", "..", "..", "..", "bin", "nats")} {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			abs, _ := filepath.Abs(p)
			return abs
		}
	}
	p, err := exec.LookPath("nats")
	if err != nil {
		t.Skip("no NATS CLI: run make tools")
	}
	return p
}

// output is a process's combined output, read while it runs.
type output struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// natsSub runs `nats sub subject` with cred until stop (or the test's
// end) and returns its output.
func natsSub(t *testing.T, cli string, cred *api.EventCredential, subject string) (out *output, stop func()) {
	t.Helper()
	out = &output{}
	// The credentials as `atoll events credentials --env` exports them.
	cmd := exec.Command(cli, "sub", subject) //nolint:gosec // G204: the test's own CLI
	cmd.Env = append(os.Environ(), "NATS_URL="+cred.Servers, "NATS_USER="+cred.User, "NATS_PASSWORD="+cred.Password)
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	t.Cleanup(stop)
	return out, stop
}

func appDoc(name string) []byte {
	return fmt.Appendf(nil, `{"apiVersion":"atoll.dev/v1","kind":"App","metadata":{"name":%q},
"spec":{"replicas":1,"template":{"containers":[{"name":"web","image":"nginx:1.27","resources":{"requests":{"cpu":"10m","memory":"16Mi"}}}]}}}`, name)
}

// TestEventsCredentialsWithTheNATSCLI: with a project admin's events
// credentials, the NATS CLI receives the App's lifecycle as CloudEvents;
// another project's subjects and the platform's are refused by the
// server; the durable consumer, stopped during a scale, delivers the
// scaled event once back; a revoke disconnects within 5 s.
func TestEventsCredentialsWithTheNATSCLI(t *testing.T) {
	e2e.Need(t)
	cli := natsCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	alice, err := sdk.New(reg.GatewayURL, sdk.WithToken(reg.Token("alice", false, map[string]string{"web": "admin"})))
	require.NoError(t, err)
	bob, err := sdk.New(reg.GatewayURL, sdk.WithToken(reg.Token("bob", false, map[string]string{"web": "developer"})))
	require.NoError(t, err)
	_, err = bob.CreateEventCredentials(ctx, "web", api.EventCredentialRequest{Name: "bob"})
	require.True(t, sdk.IsForbidden(err), "a developer made events credentials: %v", err)
	cred, err := alice.CreateEventCredentials(ctx, "web", api.EventCredentialRequest{Name: "billing"})
	require.NoError(t, err)

	live, _ := natsSub(t, cli, cred, "atoll.evt.web.>")
	other, _ := natsSub(t, cli, cred, "atoll.evt.other.>")
	all, _ := natsSub(t, cli, cred, "atoll.>")
	durable, stopDurable := natsSub(t, cli, cred, cred.Deliver)
	for name, o := range map[string]*output{"atoll.evt.other.>": other, "atoll.>": all} {
		assert.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Contains(c, o.String(), "Permissions Violation for Subscription to \""+name+"\"")
		}, 15*time.Second, 100*time.Millisecond, "the server did not refuse %s", name)
	}
	// Subscribed once the CLI says so.
	for _, o := range []*output{live, durable} {
		require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Contains(c, o.String(), "Subscribing on") }, 15*time.Second, 50*time.Millisecond)
	}

	_, err = alice.CreateWorkloadJSON(ctx, "web", appDoc("shop"), "")
	require.NoError(t, err)
	for _, ev := range []string{api.EventAdmitted, api.EventScheduled, api.EventPropagated, api.EventRunning} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			got := live.String()
			assert.Contains(c, got, "atoll.evt.web.app.shop."+ev)
			assert.Contains(c, got, "ce-type: dev.atoll.workload."+ev)
		}, 2*time.Minute, 200*time.Millisecond, "the CLI did not receive %s as a CloudEvent:\n%s", ev, live.String())
	}
	for _, attr := range []string{"ce-specversion: 1.0", "ce-source: /v1/projects/web", "ce-subject: app/shop", "ce-id: web.app.shop.", "ce-time: "} {
		assert.Contains(t, strings.ToLower(live.String()), strings.ToLower(attr))
	}
	// The API's events (the SSE stream's too) carry the same CloudEvents
	// ids as the NATS messages: a consumer of both deduplicates on them.
	listed, err := alice.ListEvents(ctx, "web", "app", "shop", 0)
	require.NoError(t, err)
	seen := 0
	for _, e := range listed {
		if !slices.Contains([]string{api.EventAdmitted, api.EventScheduled, api.EventPropagated, api.EventRunning}, e.Event) {
			continue
		}
		seen++
		assert.True(t, strings.HasPrefix(e.CloudEventId, "web.app.shop."), "event %d's cloudEventId %q", e.Id, e.CloudEventId)
		assert.Contains(t, strings.ToLower(live.String()), strings.ToLower("ce-id: "+e.CloudEventId), "the %s event's id over NATS", e.Event)
	}
	assert.GreaterOrEqual(t, seen, 4, "the listed events")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, durable.String(), "dev.atoll.workload.running")
	}, 30*time.Second, 200*time.Millisecond, "the durable consumer did not deliver running")

	// The durable subscriber is down during a scale.
	stopDurable()
	_, err = alice.Scale(ctx, "web", "app", "shop", 2)
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, live.String(), "dev.atoll.workload.scaled")
	}, time.Minute, 200*time.Millisecond, "no scaled event")
	back, _ := natsSub(t, cli, cred, cred.Deliver)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, back.String(), "dev.atoll.workload.scaled")
	}, 30*time.Second, 200*time.Millisecond, "the restarted durable subscriber missed the scaled event:\n%s", back.String())
	assert.NotContains(t, back.String(), "dev.atoll.workload.admitted", "the durable consumer delivered again what it had delivered")

	// A revoke disconnects within 5 s.
	closed := make(chan struct{})
	nc, err := nats.Connect(cred.Servers, nats.UserInfo(cred.User, cred.Password), nats.CustomInboxPrefix(cred.InboxPrefix),
		nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	require.NoError(t, err)
	defer nc.Close()
	start := time.Now()
	require.NoError(t, alice.RevokeEventCredentials(ctx, "web", "billing"))
	select {
	case <-closed:
		t.Logf("disconnected %s after the revoke", time.Since(start).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("still connected 5 s after the revoke")
	}
	assert.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, strings.ToLower(live.String()), "disconnected")
	}, 5*time.Second, 100*time.Millisecond, "the CLI was not disconnected:\n%s", live.String())
	_, err = nats.Connect(cred.Servers, nats.UserInfo(cred.User, cred.Password), nats.MaxReconnects(0))
	require.Error(t, err, "revoked credentials connect")
	// The CLI with them fails, as the tutorial shows.
	cmd := exec.CommandContext(ctx, cli, "sub", "atoll.evt.web.>", "--count", "1") //nolint:gosec // G204: the test's own CLI
	cmd.Env = append(os.Environ(), "NATS_URL="+cred.Servers, "NATS_USER="+cred.User, "NATS_PASSWORD="+cred.Password)
	b, err := cmd.CombinedOutput()
	require.Error(t, err, "the NATS CLI subscribed with revoked credentials: %s", b)
	t.Logf("the NATS CLI with revoked credentials: %s", bytes.TrimSpace(b))
}
