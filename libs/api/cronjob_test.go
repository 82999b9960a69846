package api

import (
	"strings"
	"testing"
)

const tmplJSON = `"template":{"containers":[{"name":"c","image":"busybox"}]}`

// TestCronJobValidation: a good CronJob passes with its defaults; each bad
// one is refused naming the field.
func TestCronJobValidation(t *testing.T) {
	w, err := Decode([]byte(`{"apiVersion":"atoll.dev/v1","kind":"CronJob","metadata":{"project":"p","name":"c"},"spec":{"schedule":"*/5 9-17 * jan-jun MON-FRI","timeZone":"Europe/Paris",` + tmplJSON + `}}`))
	if err != nil {
		t.Fatal(err)
	}
	w.Spec.Default()
	if fe := Validate(w); len(fe) > 0 {
		t.Fatalf("good CronJob refused: %v", fe)
	}
	s := w.Spec.(*CronJobSpec)
	if s.ConcurrencyPolicy != ConcurrencyAllow || *s.StartingDeadlineSeconds != DefaultCronStartingDeadlineSeconds ||
		*s.SuccessfulJobsHistoryLimit != 3 || *s.FailedJobsHistoryLimit != 1 || s.Pods() != 1 {
		t.Errorf("defaults: %+v", s)
	}
	if !Placed(KindCronJob) || EveryCluster(KindCronJob) || AdminOnly(KindCronJob) {
		t.Error("a CronJob is placed, in one cluster, by anyone")
	}
	cases := []struct{ name, spec, field string }{
		{"no schedule", `{` + tmplJSON + `}`, "spec.schedule"},
		{"four fields", `{"schedule":"* * * *",` + tmplJSON + `}`, "spec.schedule"},
		{"minute 60", `{"schedule":"60 * * * *",` + tmplJSON + `}`, "spec.schedule"},
		{"backwards range", `{"schedule":"* 5-3 * * *",` + tmplJSON + `}`, "spec.schedule"},
		{"step 0", `{"schedule":"*/0 * * * *",` + tmplJSON + `}`, "spec.schedule"},
		{"bad month", `{"schedule":"* * * foo *",` + tmplJSON + `}`, "spec.schedule"},
		{"tz in schedule", `{"schedule":"TZ=UTC * * * * *",` + tmplJSON + `}`, "spec.schedule"},
		{"bad zone", `{"schedule":"* * * * *","timeZone":"Mars/Olympus",` + tmplJSON + `}`, "spec.timeZone"},
		{"bad policy", `{"schedule":"* * * * *","concurrencyPolicy":"Sometimes",` + tmplJSON + `}`, "spec.concurrencyPolicy"},
		{"deadline 0", `{"schedule":"* * * * *","startingDeadlineSeconds":0,` + tmplJSON + `}`, "spec.startingDeadlineSeconds"},
		{"history", `{"schedule":"* * * * *","failedJobsHistoryLimit":-1,` + tmplJSON + `}`, "spec.failedJobsHistoryLimit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, err := Decode([]byte(`{"apiVersion":"atoll.dev/v1","kind":"CronJob","metadata":{"project":"p","name":"c"},"spec":` + c.spec + `}`))
			if err != nil {
				t.Fatal(err)
			}
			w.Spec.Default()
			fe := Validate(w)
			found := false
			for _, f := range fe {
				found = found || f.Field == c.field
			}
			if !found {
				t.Errorf("errors %v, want one on %s", fe, c.field)
			}
		})
	}
}

func TestParseCron(t *testing.T) {
	for _, ok := range []string{"* * * * *", "@hourly", "0 0 1 1 0", "59 23 31 12 7", "1,2,5-9/2 * ? * sun-sat", "0 */6 * * *"} {
		if err := ParseCron(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "* * * * * *", "0 24 * * *", "0 0 0 * *", "0 0 * 13 *", "0 0 * * 8", "a * * * *", "1-x * * * *"} {
		if err := ParseCron(bad); err == nil {
			t.Errorf("%q accepted", bad)
		} else if !strings.Contains(err.Error(), "field") && bad != "" && !strings.Contains(err.Error(), "five") {
			t.Errorf("%q: %v does not name the field", bad, err)
		}
	}
}

// TestDaemonKind: a Daemon is admin-only, placed in every cluster, and
// reserves no pods.
func TestDaemonKind(t *testing.T) {
	w, err := Decode([]byte(`{"apiVersion":"atoll.dev/v1","kind":"Daemon","metadata":{"project":"ops","name":"agent"},"spec":{"placement":{"clusterSelector":{"env":"prod"},"tolerations":[{"key":"kwok.x-k8s.io/node","operator":"Exists"}]},` + tmplJSON + `}}`))
	if err != nil {
		t.Fatal(err)
	}
	w.Spec.Default()
	if fe := Validate(w); len(fe) > 0 {
		t.Fatalf("good Daemon refused: %v", fe)
	}
	if !AdminOnly(KindDaemon) || !EveryCluster(KindDaemon) || !Placed(KindDaemon) || AdminOnly(KindApp) {
		t.Error("a Daemon is admin-only and placed in every cluster; an App is not admin-only")
	}
	if DemandOf(w).Pods != 0 || w.Spec.(*DaemonSpec).MaxUnavailable != 1 {
		t.Errorf("demand %+v spec %+v", DemandOf(w), w.Spec)
	}
	w.Spec.(*DaemonSpec).MaxUnavailable = -1
	if fe := Validate(w); len(fe) != 1 || fe[0].Field != "spec.maxUnavailable" {
		t.Errorf("errors %v, want spec.maxUnavailable", fe)
	}
}
