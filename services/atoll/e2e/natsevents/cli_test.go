package natsevents

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/services/atoll/cli"
	"atoll.dev/services/atoll/e2e"
)

// atoll runs the CLI in process against the region's gateway as the
// holder of tok.
func atoll(t *testing.T, tok string, args ...string) (string, error) {
	t.Helper()
	root := cli.Root()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append([]string{"--config", filepath.Join(t.TempDir(), "config.yaml"), "--server", reg.GatewayURL, "--token", tok}, args...))
	err := root.Execute()
	return out.String() + errOut.String(), err
}

// TestEventsCredentialsCLI: `atoll events credentials --env` prints
// exports a NATS client connects with; list shows them without their
// password; revoke ends them.
func TestEventsCredentialsCLI(t *testing.T) {
	e2e.Need(t)
	admin := reg.Token("carol", false, map[string]string{"cli": "admin"})
	out, err := atoll(t, admin, "events", "credentials", "-p", "cli", "--name", "ops", "--env")
	require.NoError(t, err, out)
	env := map[string]string{}
	for line := range strings.Lines(out) {
		k, v, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "export "), "=")
		require.True(t, ok, "not an export: %q", line)
		env[k] = strings.Trim(v, "'")
	}
	for _, k := range []string{"NATS_URL", "NATS_USER", "NATS_PASSWORD", "NATS_INBOX_PREFIX", "ATOLL_EVENTS_DELIVER"} {
		assert.NotEmpty(t, env[k], k)
	}
	nc, err := nats.Connect(env["NATS_URL"], nats.UserInfo(env["NATS_USER"], env["NATS_PASSWORD"]), nats.CustomInboxPrefix(env["NATS_INBOX_PREFIX"]))
	require.NoError(t, err)
	nc.Close()

	out, err = atoll(t, admin, "events", "credentials", "list", "-p", "cli")
	require.NoError(t, err, out)
	assert.Contains(t, out, "ops")
	assert.NotContains(t, out, env["NATS_PASSWORD"])
	dev := reg.Token("dan", false, map[string]string{"cli": "developer"})
	out, err = atoll(t, dev, "events", "credentials", "revoke", "ops", "-p", "cli")
	require.Error(t, err, "a developer revoked credentials: %s", out)
	out, err = atoll(t, admin, "events", "credentials", "revoke", "ops", "-p", "cli")
	require.NoError(t, err, out)
	_, err = nats.Connect(env["NATS_URL"], nats.UserInfo(env["NATS_USER"], env["NATS_PASSWORD"]), nats.MaxReconnects(0))
	require.Error(t, err, "revoked credentials connect")
}
