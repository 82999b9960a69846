package cli

import (
	"fmt"
	"slices"
	"strings"
)

// The kinds of workload, as documents and the Compute API name them
// (libs/api registers them; kinds_test.go checks this table against it).
const (
	kindApp         = "App"
	kindJobSet      = "JobSet"
	kindPod         = "Pod"
	kindCronJob     = "CronJob"
	kindDaemon      = "Daemon"
	kindTrainingJob = "TrainingJob"
	kindScaler      = "Scaler"
	kindConfig      = "Config"
	kindSecret      = "Secret"
)

// The operations on a workload, as the Compute API names them (libs/api
// Ops).
const (
	opPause            = "pause"
	opResume           = "resume"
	opStop             = "stop"
	opStart            = "start"
	opRestart          = "restart"
	opRestartContainer = "restart-container"
	opScale            = "scale"
	opRolloutPause     = "rollout-pause"
	opRolloutResume    = "rollout-resume"
	opRolloutUndo      = "rollout-undo"
)

// kindInfo is what the CLI knows of one kind: the words a user types for
// it and what applies to it.
type kindInfo struct {
	// Name is the kind as documents and the API write it.
	Name string
	// Aliases are the other words a user may type for it, in lower case:
	// the plural (the name itself, in any case, always works).
	Aliases []string
	// Placed is true for a kind the scheduler places in member clusters;
	// a Scaler is a policy another service acts on (libs/api Unplaced).
	Placed bool
	// Pods is true for a kind that runs pods: logs, exec and the tables
	// of pods per zone and cluster apply to it.
	Pods bool
	// AdminOnly is true for a kind only platform admins may create.
	AdminOnly bool
	// EveryCluster is true for a kind placed in every member cluster
	// that passes its filters, not in a count of them.
	EveryCluster bool
	// Ops are the operations that apply to it.
	Ops []string
}

// podOps are the operations of every kind that runs pods and cannot scale.
var podOps = []string{opPause, opResume, opStop, opStart, opRestart, opRestartContainer}

// kinds is every kind the CLI knows, in the order `atoll get` lists them.
// A kind the API registers must be here (TestKindsMatchAPI).
var kinds = []kindInfo{
	{Name: kindApp, Aliases: []string{"apps"}, Placed: true, Pods: true,
		Ops: []string{opPause, opResume, opStop, opStart, opRestart, opRestartContainer, opScale, opRolloutPause, opRolloutResume, opRolloutUndo}},
	{Name: kindJobSet, Aliases: []string{"jobsets"}, Placed: true, Pods: true,
		Ops: []string{opPause, opResume, opStop, opStart, opRestart, opRestartContainer, opScale}},
	{Name: kindPod, Aliases: []string{"pods"}, Placed: true, Pods: true,
		Ops: []string{opStop, opStart, opRestart, opRestartContainer}},
	{Name: kindCronJob, Aliases: []string{"cronjobs"}, Placed: true, Pods: true, Ops: podOps},
	{Name: kindDaemon, Aliases: []string{"daemons"}, Placed: true, Pods: true, AdminOnly: true, EveryCluster: true, Ops: []string{opStop, opStart, opRestart, opRestartContainer}},
	{Name: kindTrainingJob, Aliases: []string{"trainingjobs"}, Placed: true, Pods: true, Ops: podOps},
	{Name: kindScaler, Aliases: []string{"scalers"}, Ops: []string{opPause, opResume}},
	// Data a workload names (create.go makes them from literals and files).
	{Name: kindConfig, Aliases: []string{"configs"}},
	{Name: kindSecret, Aliases: []string{"secrets"}},
}

// kindNames lists the kinds' names in the table's order.
func kindNames() []string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.Name
	}
	return names
}

// kindList is the kinds' names for a help text: "App, JobSet or Pod".
func kindList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// kindsWhere lists the names of the kinds for which ok holds.
func kindsWhere(ok func(kindInfo) bool) []string {
	var names []string
	for _, k := range kinds {
		if ok(k) {
			names = append(names, k.Name)
		}
	}
	return names
}

// lookupKind returns the kind a user typed: its name or an alias, in any
// case.
func lookupKind(s string) (kindInfo, error) {
	l := strings.ToLower(s)
	for _, k := range kinds {
		if l == strings.ToLower(k.Name) || slices.Contains(k.Aliases, l) {
			return k, nil
		}
	}
	return kindInfo{}, fmt.Errorf("unknown kind %q; one of %s", s, strings.Join(kindNames(), ", "))
}

// kindName returns the kind a user typed (any case, singular or plural)
// as the platform names it.
func kindName(s string) (string, error) {
	k, err := lookupKind(s)
	return k.Name, err
}

// infoOf returns what the CLI knows of a kind the API answered; a kind
// it does not know (a newer region's) is taken to run pods and allow
// every operation, so the gateway decides.
func infoOf(name string) kindInfo {
	for _, k := range kinds {
		if k.Name == name {
			return k
		}
	}
	return kindInfo{Name: name, Placed: true, Pods: true}
}

// needPods refuses a kind that runs no pods (logs, exec).
func needPods(k kindInfo) error {
	if k.Pods {
		return nil
	}
	return fmt.Errorf("a %s runs no pods: no logs or exec (kinds with pods: %s)", k.Name, strings.Join(kindsWhere(func(k kindInfo) bool { return k.Pods }), ", "))
}

// needOp returns a check that refuses a kind op does not apply to.
func needOp(op string) func(kindInfo) error {
	return func(k kindInfo) error {
		if k.Ops == nil || slices.Contains(k.Ops, op) {
			return nil
		}
		return fmt.Errorf("%s does not apply to a %s (it applies to %s)", op, k.Name, kindList(kindsWhere(func(k kindInfo) bool { return slices.Contains(k.Ops, op) })))
	}
}
