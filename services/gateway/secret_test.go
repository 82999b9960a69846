package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/libs/envelope"
	"atoll.dev/services/admission"
	"atoll.dev/services/gateway"
	"atoll.dev/services/quota"
)

// TestSecretValuesAreNeverRead: a Secret written through the API, created
// then given new values, is read back on every path a client has (the
// write's answer and its idempotent replay, GET, the lists, the events
// listed and watched) and none of the bytes hold a value, in the clear or
// sealed: they show its keys, version, digest and writer. What the region
// stores of it (the workloads bucket's every revision, the idempotency
// records, the events and audit streams) holds no value in the clear.
func TestSecretValuesAreNeverRead(t *testing.T) {
	g := newTestGateway(t, gateway.Config{RatePerSecond: 1e9, Burst: 1 << 30})
	ctx := t.Context()
	dir := t.TempDir()
	require.NoError(t, envelope.GenerateKEK(dir, "k1"))
	sealer, err := envelope.LoadSealer(filepath.Join(dir, envelope.PublicFile("k1")))
	require.NoError(t, err)
	log := slog.New(slog.DiscardHandler)
	cfg := admission.DefaultConfig()
	cfg.Sealer = sealer
	q, a := quota.New(g.Bus, log, quota.Ample()), admission.New(g.Bus, log, cfg)
	for _, s := range []interface {
		Start(context.Context) error
		Stop() error
	}{q, a} {
		require.NoError(t, s.Start(ctx))
		t.Cleanup(func() { _ = s.Stop() })
	}

	values := []string{"first-plaintext-value-41", "second-plaintext-value-42", "rotated-plaintext-value-43"}
	doc := func(data map[string]string) []byte {
		d, _ := json.Marshal(data)
		return []byte(`{"apiVersion":"atoll.dev/v1","kind":"Secret","metadata":{"name":"db","labels":{"app":"web"}},"spec":{"data":` + string(d) + `}}`)
	}
	var reads []struct {
		path string
		body []byte
	}
	read := func(method, path string, body []byte, hdr map[string]string, want int) []byte {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, g.URL+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+g.Admin)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		require.Equal(t, want, resp.StatusCode, "%s %s: %s", method, path, b)
		reads = append(reads, struct {
			path string
			body []byte
		}{method + " " + path, b})
		return b
	}
	idem := map[string]string{"Idempotency-Key": "create-db-1"}
	created := read("POST", "/v1/projects/p/workloads", doc(map[string]string{"PASSWORD": values[0], "TOKEN": values[1]}), idem, http.StatusCreated)
	read("POST", "/v1/projects/p/workloads", doc(map[string]string{"PASSWORD": values[0], "TOKEN": values[1]}), idem, http.StatusCreated) // the replay
	var w computeapi.Workload
	require.NoError(t, json.Unmarshal(created, &w))
	var v computeapi.SecretView
	require.NoError(t, json.Unmarshal(w.Spec, &v))
	require.Equal(t, []string{"PASSWORD", "TOKEN"}, v.Keys)
	require.EqualValues(t, 1, v.Version)
	require.Equal(t, "admin", v.UpdatedBy)
	require.Len(t, v.Digest, 64)

	read("PUT", "/v1/projects/p/workloads/secret/db", doc(map[string]string{"PASSWORD": values[2]}), nil, http.StatusOK)
	require.Eventually(t, func() bool {
		b := read("GET", "/v1/projects/p/workloads/secret/db", nil, nil, http.StatusOK)
		return bytes.Contains(b, []byte(`"version":2`))
	}, 5*time.Second, 20*time.Millisecond, "GET does not show version 2")
	read("GET", "/v1/projects/p/workloads", nil, nil, http.StatusOK)
	read("GET", "/v1/projects/p/workloads?kind=secret", nil, nil, http.StatusOK)
	read("GET", "/v1/projects/p/workloads/secret/db/events", nil, nil, http.StatusOK)
	reads = append(reads, struct {
		path string
		body []byte
	}{"watch events", watchEvents(t, g, "/v1/projects/p/workloads/secret/db/events?watch=true", 2)})

	// What the bucket holds: sealed, so its ciphertext is known here to
	// look for in the reads.
	kv, err := g.Bus.KV(ctx, bus.BucketWorkloads)
	require.NoError(t, err)
	history, err := kv.History(ctx, api.Key("p", api.KindSecret, "db"))
	require.NoError(t, err)
	require.Len(t, history, 2)
	var sealed []string
	var stored [][]byte
	for _, e := range history {
		st, err := api.Decode(e.Value())
		require.NoError(t, err)
		s := st.Spec.(*api.SecretSpec)
		require.NotNil(t, s.Sealed, "revision %d not sealed", e.Revision())
		sealed = append(sealed, base64.StdEncoding.EncodeToString(s.Sealed.Ciphertext), base64.StdEncoding.EncodeToString(s.Sealed.WrappedKey))
		stored = append(stored, e.Value())
	}
	for _, r := range reads {
		for _, x := range append(append([]string{`"sealed"`, `"data"`, `"ciphertext"`, `"wrappedKey"`}, values...), sealed...) {
			if bytes.Contains(r.body, []byte(x)) {
				t.Errorf("%s returns %q:\n%s", r.path, x, r.body)
			}
		}
	}
	stored = append(stored, streamBytes(t, g.Bus, bus.StreamEvents)...)
	stored = append(stored, streamBytes(t, g.Bus, bus.StreamAudit)...)
	idemKV, err := g.Bus.KV(ctx, bus.BucketIdempotency)
	require.NoError(t, err)
	keys, err := idemKV.ListKeys(ctx)
	require.NoError(t, err)
	n := 0
	for k := range keys.Keys() {
		e, err := idemKV.Get(ctx, k)
		require.NoError(t, err)
		stored, n = append(stored, e.Value()), n+1
	}
	require.Positive(t, n, "no idempotency record to scan")
	for i, b := range stored {
		for _, x := range values {
			if bytes.Contains(b, []byte(x)) {
				t.Errorf("stored message %d holds %q in the clear", i, x)
			}
		}
	}
}

// watchEvents reads the Server-Sent Events of path until it has seen n
// events, and returns the bytes read.
func watchEvents(t *testing.T, g *testGateway, path string, n int) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", g.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+g.Admin)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out bytes.Buffer
	sc := bufio.NewScanner(resp.Body)
	for seen := 0; seen < n && sc.Scan(); {
		out.Write(sc.Bytes())
		out.WriteByte('\n')
		if strings.HasPrefix(sc.Text(), "data:") {
			seen++
		}
	}
	require.NoError(t, ctx.Err(), "watch saw fewer than %d events:\n%s", n, out.String())
	return out.Bytes()
}

// streamBytes is every message of a stream, as stored.
func streamBytes(t *testing.T, b *bus.Bus, name string) [][]byte {
	t.Helper()
	s, err := b.JS.Stream(t.Context(), name)
	require.NoError(t, err)
	info, err := s.Info(t.Context())
	require.NoError(t, err)
	var out [][]byte
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := s.GetMsg(t.Context(), seq)
		if err != nil {
			continue // deleted
		}
		out = append(out, m.Data)
	}
	require.NotEmpty(t, out, "stream %s is empty", name)
	return out
}
