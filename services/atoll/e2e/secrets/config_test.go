package secrets

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/sdk"
	"atoll.dev/services/atoll/cli"
	"atoll.dev/services/atoll/e2e"
)

const project = "conf"

// atoll runs the CLI against the region's gateway as the admin.
func atoll(t *testing.T, args ...string) string {
	t.Helper()
	root := cli.Root()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	base := []string{"--config", filepath.Join(t.TempDir(), "config.yaml"), "--server", reg.GatewayURL, "--token", reg.AdminToken, "-p", project}
	if reg.CAFile != "" {
		base = append(base, "--ca", reg.CAFile)
	}
	root.SetArgs(append(base, args...))
	require.NoError(t, root.Execute(), "atoll %s: %s", strings.Join(args, " "), errOut.String())
	return out.String()
}

func unique(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// TestConfigAndSecret: a Config and a Secret made with `atoll create`
// (the Secret then given new values through the SDK) read back as
// written, the Secret with its keys, version and writer and never a
// value, on the SDK's and the CLI's every read; the workloads bucket
// holds no value of it in the clear, in any message; the gateway's
// process has no key-encryption key in its environment, its command line
// or its open files (admission's has the public one: the check sees what
// is there); both delete.
func TestConfigAndSecret(t *testing.T) {
	e2e.Need(t)
	ctx := t.Context()
	dir := t.TempDir()
	conf, tokenFile := filepath.Join(dir, "nginx.conf"), filepath.Join(dir, "token.txt")
	password, token, rotated := unique("e2e-password-"), unique("e2e-token-"), unique("e2e-rotated-")
	require.NoError(t, os.WriteFile(conf, []byte("listen 8080;\n"), 0o600))
	require.NoError(t, os.WriteFile(tokenFile, []byte(token), 0o600))

	assert.Contains(t, atoll(t, "create", "config", "web-conf", "--from-literal", "LOG_LEVEL=info", "--from-file", conf), "config/web-conf created")
	assert.Contains(t, atoll(t, "create", "secret", "web-db", "--from-literal", "PASSWORD="+password, "--from-file", "TOKEN="+tokenFile), "secret/web-db created")

	c, err := sdk.New(reg.GatewayURL, sdk.WithToken(reg.AdminToken), sdk.WithTimeout(10*time.Second))
	require.NoError(t, err)
	doc, err := sdk.NewSecret("web-db", nil, map[string]string{"PASSWORD": rotated})
	require.NoError(t, err)
	body, err := json.Marshal(doc)
	require.NoError(t, err)
	_, err = c.UpdateWorkloadJSON(ctx, project, api.KindSecret, "web-db", body)
	require.NoError(t, err)

	// The Config reads back whole.
	cw, err := c.Get(ctx, project, api.KindConfig, "web-conf")
	require.NoError(t, err)
	cs, err := sdk.ConfigOf(cw)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"LOG_LEVEL": "info"}, cs.Data)
	assert.Equal(t, map[string]string{"nginx.conf": "listen 8080;\n"}, cs.Files)

	// The Secret reads back as its keys, version 2 and writer, on every
	// read; none holds a value or its sealing.
	var reads []string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		w, err := c.Get(ctx, project, api.KindSecret, "web-db")
		if !assert.NoError(ct, err) {
			return
		}
		v, err := sdk.SecretOf(w)
		if !assert.NoError(ct, err) {
			return
		}
		assert.Equal(ct, []string{"PASSWORD"}, v.Keys)
		assert.EqualValues(ct, 2, v.Version)
		assert.Equal(ct, "admin", v.UpdatedBy)
		assert.Len(ct, v.Digest, 64)
		b, _ := json.Marshal(w)
		reads = append(reads[:0], string(b))
	}, 10*time.Second, 100*time.Millisecond)
	reads = append(reads,
		atoll(t, "get", "secret", "web-db", "-o", "json"),
		atoll(t, "get", "secrets"),
		atoll(t, "get", "-o", "yaml"),
		atoll(t, "describe", "secret", "web-db"),
		atoll(t, "describe", "secret", "web-db", "-o", "json"))
	assert.Contains(t, reads[4], "PASSWORD")
	for i, r := range reads {
		for _, x := range []string{password, token, rotated, `"sealed"`, `sealed:`, `ciphertext`, `wrappedKey`} {
			assert.NotContains(t, r, x, "read %d", i)
		}
	}

	// The workloads bucket, every message it holds: no value in the clear;
	// the Secret's are sealed.
	s, err := reg.Bus.JS.Stream(ctx, "KV_"+bus.BucketWorkloads)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	secretSubject := "$KV." + bus.BucketWorkloads + "." + api.Key(project, api.KindSecret, "web-db")
	sealed := 0
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted
		}
		for _, x := range []string{password, token, rotated} {
			assert.False(t, bytes.Contains(m.Data, []byte(x)), "message %d (%s) holds a value in the clear", seq, m.Subject)
		}
		if m.Subject == secretSubject && bytes.Contains(m.Data, []byte(`"sealed"`)) {
			sealed++
		}
	}
	assert.Equal(t, 2, sealed, "the Secret's two versions, sealed, in the bucket")

	// The gateway's process holds no key-encryption key: not in its
	// environment, its command line or its open files.
	kekRoot := filepath.Dir(reg.KEKDir)
	secrets := []string{kekRoot, reg.KEKDir, reg.KEKPublicFile, "KEK"}
	pub, err := os.ReadFile(reg.KEKPublicFile)
	require.NoError(t, err)
	if f := strings.Fields(string(pub)); len(f) > 0 {
		secrets = append(secrets, f[len(f)-1]) // "<id> <base64>": the key
	}
	keys, err := os.ReadDir(reg.KEKDir)
	require.NoError(t, err)
	require.NotEmpty(t, keys, "no private key in %s", reg.KEKDir)
	for _, k := range keys {
		b, err := os.ReadFile(filepath.Join(reg.KEKDir, k.Name()))
		require.NoError(t, err)
		secrets = append(secrets, strings.TrimSpace(string(b)))
	}
	pids := processes(ctx, t)
	gw := procView(t, pids["gateway"])
	for _, x := range secrets {
		assert.NotContains(t, strings.ToUpper(gw), strings.ToUpper(x), "the gateway's process (pid %d) names a key-encryption key", pids["gateway"])
	}
	assert.Contains(t, procView(t, pids["admission"]), reg.KEKPublicFile, "admission's process has no public key: the check sees nothing")

	// Both delete.
	assert.Contains(t, atoll(t, "delete", "config", "web-conf"), "config/web-conf deleted")
	assert.Contains(t, atoll(t, "delete", "secret", "web-db"), "secret/web-db deleted")
	for _, kind := range []string{api.KindConfig, api.KindSecret} {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			_, err := c.Get(ctx, project, kind, map[string]string{api.KindConfig: "web-conf", api.KindSecret: "web-db"}[kind])
			assert.True(ct, sdk.IsNotFound(err), "get after delete: %v", err)
		}, 10*time.Second, 100*time.Millisecond)
	}
}

// processes maps each service to the PID of its replica 0.
func processes(ctx context.Context, t *testing.T) map[string]int {
	t.Helper()
	usage, err := reg.Usage(ctx)
	require.NoError(t, err)
	out := map[string]int{}
	for _, u := range usage {
		if u.Replica.Index == 0 {
			out[u.Replica.Service] = u.PID
		}
	}
	require.Contains(t, out, "gateway", "the gateway is not a process of its own")
	require.Contains(t, out, "admission")
	return out
}

// procView is what a process was given and holds open: its environment,
// its command line, its mounts and the targets of its open file
// descriptors.
func procView(t *testing.T, pid int) string {
	t.Helper()
	base := filepath.Join("/proc", strconv.Itoa(pid))
	var b strings.Builder
	for _, f := range []string{"environ", "cmdline", "mountinfo"} {
		data, err := os.ReadFile(filepath.Join(base, f))
		require.NoError(t, err)
		b.Write(bytes.ReplaceAll(data, []byte{0}, []byte{'\n'}))
		b.WriteByte('\n')
	}
	fds, err := os.ReadDir(filepath.Join(base, "fd"))
	require.NoError(t, err)
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join(base, "fd", fd.Name())); err == nil {
			b.WriteString(target + "\n")
		}
	}
	return b.String()
}
