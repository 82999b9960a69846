package cli

import (
	"strings"
	"testing"

	"atoll.dev/libs/computeapi"
)

func TestWait(t *testing.T) {
	cliEnv(t)
	f, url := newFake(t)
	f.workloads = []computeapi.Workload{
		{Kind: kindApp, Metadata: computeapi.Metadata{Project: "demo", Name: "web"}, Status: computeapi.WorkloadStatus{Phase: "Running", Ready: 3}},
		{Kind: kindCronJob, Metadata: computeapi.Metadata{Project: "demo", Name: "tick"}, Status: computeapi.WorkloadStatus{Phase: "Running",
			CronJob: computeapi.CronJobStatus{Runs: []computeapi.CronJobRun{{Name: "tick-1", Outcome: computeapi.CronJobRunOutcomeActive}}}}},
	}
	tests := []struct {
		args    []string
		wantOut string
		wantErr string
	}{
		{args: []string{"wait", "app", "web", "--for", "phase=running"}, wantOut: "app/web phase=running after"},
		{args: []string{"wait", "cronjob", "tick", "--for", "runs=1"}, wantOut: "cronjob/tick runs=1 after"},
		{args: []string{"wait", "app", "web", "--for", "ready=3"}, wantOut: "app/web ready=3 after"},
		{args: []string{"wait", "app", "web", "--for", "ready=6", "--timeout", "700ms"}, wantErr: "app/web: not ready=6 within 700ms (now ready=3)"},
		{args: []string{"wait", "app", "web", "--for", "phase=Succeeded", "--timeout", "1200ms"}, wantErr: "app/web: not phase=Succeeded within 1.2s (now phase=Running)"},
		{args: []string{"wait", "app", "nope", "--for", "phase=Running", "--timeout", "700ms"}, wantErr: "not phase=Running within 700ms (now not found)"},
		{args: []string{"wait", "app", "nope", "--for", "delete"}, wantOut: "app/nope deleted after"},
		{args: []string{"wait", "app", "web", "--for", "delete", "--timeout", "700ms"}, wantErr: "app/web: not deleted within 700ms (now phase=Running)"},
		{args: []string{"wait", "cronjob", "tick", "--for", "rollout=Complete"}, wantErr: "only an App has a rollout"},
		{args: []string{"wait", "app", "web", "--for", "runs=1"}, wantErr: "only a CronJob has runs"},
		{args: []string{"wait", "app", "web", "--for", "ready"}, wantErr: "want phase=PHASE, ready=N, rollout=PHASE, runs=N or delete"},
		{args: []string{"wait", "app", "web", "--for", "size=3"}, wantErr: `unknown condition "size"`},
		{args: []string{"wait", "app", "web"}, wantErr: `required flag(s) "for" not set`},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, _, err := runCLI(t, "", append(tc.args, "--server", url, "-p", "demo")...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !strings.HasPrefix(out, tc.wantOut) {
				t.Errorf("out %q, err %v; want %q", out, err, tc.wantOut)
			}
		})
	}
}
